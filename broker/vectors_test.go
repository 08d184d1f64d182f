package broker_test

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"testing"
)

type vector struct {
	Name      string   `json:"name"`
	Frames    []string `json:"frames"`
	FramesB64 []string `json:"frames_b64"`
	Error     string   `json:"error"`
}

func (v vector) frames() [][]byte {
	var out [][]byte
	for _, f := range v.Frames {
		out = append(out, []byte(f))
	}
	for _, f := range v.FramesB64 {
		b, _ := base64.StdEncoding.DecodeString(f)
		out = append(out, b)
	}
	return out
}

// loadVectors reads ../shared/emqp-vectors.json (beside the checkout).
func loadVectors(t *testing.T) []vector {
	t.Helper()
	b, err := os.ReadFile("../../shared/emqp-vectors.json")
	if err != nil {
		t.Fatalf("the shared wire vectors: %v", err)
	}
	var f struct {
		Decode []vector `json:"decode"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f.Decode
}
