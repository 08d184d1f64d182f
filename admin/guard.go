package admin

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"strings"
)

// The admin API answers programs, not web pages of other sites. Any page
// an operator's browser shows can send requests to 127.0.0.1:47293: an
// auto-submitted form (a cross-site POST), or, after pointing its own
// name at 127.0.0.1 (DNS rebinding), reads whose answers it may see. So,
// before the token is looked at (a browser with a dashboard session would
// send that too):
//
//   - Host must name this listener: a loopback name or address, the
//     address the request came in on, or one of AdminAllowedHosts;
//     otherwise 421. A rebinding page's requests carry its own name.
//   - A request that changes something (any method but GET and HEAD)
//     must carry something no plain HTML form sends: the header
//     X-EMQ-Admin (emq's CLI sends it), a JSON body (application/json,
//     application/x-ndjson), or a raw body (application/octet-stream)
//     with an Idempotency-Key or a Bearer token (a program's plain
//     request, curl's: a page can send those headers elsewhere only
//     after a CORS preflight this listener never grants, and a browser
//     sends no Bearer token of its own accord); otherwise 403.
//   - Such a request from a browser must come from the listener's own
//     origin or one of AdminAllowedOrigins (Sec-Fetch-Site and Origin,
//     checked by net/http's CrossOriginProtection); otherwise 403.

// Header is the header a program sets on the admin API's changing
// requests (any value): a web page of another site cannot send it.
const Header = "X-EMQ-Admin"

// guard wraps the admin API with the checks above.
func (s *Server) guard(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	for _, o := range s.opts.AllowedOrigins {
		_ = cop.AddTrustedOrigin(o) // checked by Validate
	}
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refuse(w, http.StatusForbidden, "cross_site", fmt.Sprintf("cross-site request refused: origin %q is not this admin API's; "+
			"a page elsewhere must be listed in admin-allowed-origins", r.Header.Get("Origin")))
	}))
	next = cop.Handler(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostAllowed(r) {
			refuse(w, http.StatusMisdirectedRequest, "foreign_host", fmt.Sprintf("host %q is not this admin API's "+
				"(a loopback name or address, the address it listens on, or one in admin-allowed-hosts)", r.Host))
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !fromProgram(r) {
			refuse(w, http.StatusForbidden, "cross_site", "a request that changes something needs the header "+
				Header+", a JSON body (Content-Type: application/json), or a raw body (application/octet-stream) with "+
				IdempotencyKey+" or a Bearer token: what no HTML form can send")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// fromProgram reports whether r carries what a plain HTML form cannot
// send: the admin header, a JSON body, or a raw body with an
// Idempotency-Key or a Bearer token.
func fromProgram(r *http.Request) bool {
	if r.Header.Get(Header) != "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case err != nil:
		return false
	case mt == "application/json", mt == "application/x-ndjson":
		return true
	}
	return mt == "application/octet-stream" &&
		(r.Header.Get(IdempotencyKey) != "" || strings.HasPrefix(r.Header.Get("Authorization"), "Bearer "))
}

// hostAllowed reports whether r's Host names this listener. A request
// without one (HTTP/1.0) is no browser's.
func (s *Server) hostAllowed(r *http.Request) bool {
	if r.Host == "" {
		return true
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if ip := net.ParseIP(host); ip != nil {
		if ip.IsLoopback() {
			return true
		}
		if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			if tcp, ok := local.(*net.TCPAddr); ok && tcp.IP.Equal(ip) {
				return true
			}
		}
	}
	for _, allowed := range s.opts.AllowedHosts {
		if strings.EqualFold(strings.TrimSuffix(strings.Trim(allowed, "[]"), "."), host) {
			return true
		}
	}
	return false
}
