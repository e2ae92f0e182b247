package testenv

import (
	"encoding/json"
	"testing"
)

// JSON is v encoded as JSON; a value that does not encode fails t.
func JSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
