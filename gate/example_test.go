package gate_test

import (
	"log"
	"net/http"

	"github.com/x402gate/x402gate/facilitator/httpapi"
	"github.com/x402gate/x402gate/gate"
)

// A plain net/http server that charges 0.01 USDC per request under /api/, settled by a
// remote facilitator before the handler runs.
func ExampleGate_Middleware() {
	f, err := httpapi.NewClient(httpapi.ClientConfig{URL: "https://facilitator.example.com"})
	if err != nil {
		log.Fatal(err)
	}
	g, err := gate.New(gate.Config{
		Network:  "base-sepolia",
		PayTo:    "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
		Price:    "0.01 USDC",
		Resource: gate.ResourceConfig{Description: "premium data", MimeType: "application/json"},
	}, gate.Options{Facilitator: f})
	if err != nil {
		log.Fatal(err)
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paid, _ := gate.FromContext(r.Context()) // payer, tx hash, amount, network
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"paid_by":"` + paid.Settlement.Payer + `"}`))
	})
	http.Handle("/api/", g.Middleware(gate.MiddlewareOptions{
		// Behind a proxy, give the public URL: it becomes the requirement's resource.
		Resource: func(r *http.Request) string { return "https://api.example.com" + r.URL.Path },
	})(api))
	// log.Fatal(http.ListenAndServe(":8080", nil))
}
