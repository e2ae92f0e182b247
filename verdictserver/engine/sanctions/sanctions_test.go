package sanctions

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

func addr(s string) common.Address { return common.HexToAddress(s) }

func TestLoadOFACAdvancedXML(t *testing.T) {
	l, err := Load("testdata/sdn_advanced.xml")
	if err != nil {
		t.Fatal(err)
	}
	if l.Format() != "ofac-sdn-xml" || l.Name() != "sanctions:sdn_advanced.xml" {
		t.Errorf("format %q name %q", l.Format(), l.Name())
	}
	if want := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC); !l.AsOf().Equal(want) {
		t.Errorf("asOf %v, want the DateOfIssue %v", l.AsOf(), want)
	}
	for _, tc := range []struct {
		name   string
		a      string
		listed bool
	}{
		{"an ETH address, listed in mixed case", "0x5a1e000000000000000000000000000000000001", true},
		{"a second ETH address", "0x5A1E000000000000000000000000000000000002", true},
		{"an EVM address listed under USDT", "0x5a1e000000000000000000000000000000000003", true},
		{"an address under a feature type that is not a currency address", "0x5a1e0000000000000000000000000000000000ff", false},
		{"an address not in the file", "0x5a1e000000000000000000000000000000000009", false},
	} {
		if got := l.Contains(addr(tc.a)); got != tc.listed {
			t.Errorf("%s: Contains(%s) = %v", tc.name, tc.a, got)
		}
	}
	if l.Len() != 3 {
		t.Errorf("Len %d, want 3 distinct EVM addresses (the bitcoin one skipped)", l.Len())
	}
}

func TestLoadTextList(t *testing.T) {
	l, err := Load("testdata/list.txt")
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 11, 21, 6, 0, 0, 0, time.UTC); !l.AsOf().Equal(want) {
		t.Errorf("asOf %v, want the generatedAt line %v", l.AsOf(), want)
	}
	if l.Len() != 2 || !l.Contains(addr("0x5a1e000000000000000000000000000000000004")) || l.Format() != "text" {
		t.Errorf("list %d %v", l.Len(), l.Format())
	}
}

func TestTextListWithoutDateUsesModTime(t *testing.T) {
	p := filepath.Join(t.TempDir(), "plain.txt")
	if err := os.WriteFile(p, []byte("0x5a1e000000000000000000000000000000000001\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mt := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(p, mt, mt); err != nil {
		t.Fatal(err)
	}
	l, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if !l.AsOf().Equal(mt) {
		t.Errorf("asOf %v, want the modification time %v", l.AsOf(), mt)
	}
}

func TestBadListsAreRefused(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"a line that is not an address", "0x5a1e000000000000000000000000000000000001\nnot-an-address\n", "line 2"},
		{"a short address", "0x5a1e\n", "line 1"},
		{"a bad generatedAt", "# generatedAt: yesterday\n", "line 1"},
		{"xml without a Sanctions root", "<Other></Other>", "Sanctions"},
		{"ofac xml without currency feature types", "<Sanctions><ReferenceValueSets/></Sanctions>", "Digital Currency Address"},
		{"broken xml", "<Sanctions><DateOfIssue>", "ofac xml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "l")
			if err := os.WriteFile(p, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing file loaded")
	}
}
