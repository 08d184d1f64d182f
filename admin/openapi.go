package admin

import (
	_ "embed"
	"net/http"
	"strconv"
)

// OpenAPI is the admin API described in OpenAPI 3.1 (openapi.json
// beside this file), served as it is at GET /api/v1/openapi.json.
//
// It is written by hand, not generated: its prose (what each route does,
// each field's meaning, the errors' classes) is the part worth reading,
// and it is cheapest to write where it is read. What can drift is kept
// true by openapi_test.go instead:
//
//   - every route the handler serves is described, and every route
//     described is served (the routes are read from the mux.HandleFunc
//     and mux.Handle calls of this package's files, and each is sent a
//     request through the real handler);
//   - each schema named after a Go type has that type's JSON fields
//     exactly, their JSON types, and as required the fields without
//     omitempty;
//   - the main GET routes' answers from a running broker hold the fields
//     their schemas require and no field their schemas lack;
//   - make lint-openapi lints it with Redocly's CLI (redocly.yaml,
//     .redocly.lint-ignore.yaml: what it lets pass and why).
//
// To describe a new route: add its path and operation under "paths"
// (copy a neighbour: an operationId, a tag, a summary, a description,
// its parameters, its 200 and the errors it answers, with the shared
// 401/403/421/500/503 as $refs to components/responses), and its answer's
// schema under components/schemas; if the schema is a Go type's JSON,
// add the type to schemaTypes in openapi_test.go, which then checks its
// fields. The drift test names what is missing. Then run make
// lint-openapi.
//
//go:embed openapi.json
var OpenAPI []byte

// openAPIRoute serves the document.
func (s *Server) openAPIRoute(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(OpenAPI)))
		_, _ = w.Write(OpenAPI)
	})
}
