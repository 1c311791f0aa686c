package api

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// The guard (admit) runs before anything else on every request the server
// answers, the console's included, in every mode (--dev, tokens, console
// sessions). It keeps a browser from being used against the server:
//
//   - On a loopback-bound server (Options.LoopbackOnly), Host must name
//     loopback (localhost, a loopback IP literal, any port) or one of
//     Options.AllowedHosts; any other name is 421 host_not_allowed. A page
//     whose name was rebound to 127.0.0.1 (DNS rebinding) sends its own
//     name, so it can neither read nor write.
//   - A write (any method but GET, HEAD and OPTIONS) is refused with 403
//     cross_origin when its Origin is present and is not the server's own
//     (its host and port are not the request's Host nor an allowed host;
//     "null" included), or when Sec-Fetch-Site says cross-site.
//   - A write's Content-Type must be application/json (or another
//     application/*+json; a route may take more, as POST /v1/workflows
//     takes YAML): 415 otherwise. A write without a body may leave it out.
//     Browsers cannot send these types across origins without a CORS
//     preflight, which this server never grants, so a no-cors page cannot
//     write whatever it claims.
//
// Programs (the CLI, apiclient, curl) send no Origin and are not affected
// beyond the content type.

// bodyTypes are the media types a route's body may be sent as beyond JSON,
// by its ServeMux pattern.
var bodyTypes = map[string]map[string]bool{
	"POST /v1/workflows": definitionTypes,
}

// Admit answers whether the server takes r; when not, it has written the
// problem. The console calls it for the routes it serves itself.
func (s *Server) Admit(w http.ResponseWriter, r *http.Request) bool {
	_, pat := s.mux.Handler(r)
	return s.admitted(w, r, pat)
}

// admitted is Admit for a request whose route (pattern, "" for none) is
// known.
func (s *Server) admitted(w http.ResponseWriter, r *http.Request, pattern string) bool {
	if err := s.admit(r, pattern); err != nil {
		s.log.Info("api: request refused", "method", r.Method, "path", r.URL.Path, "host", r.Host,
			"origin", r.Header.Get("Origin"), "error", err)
		s.writeProblem(w, r, err)
		return false
	}
	return true
}

// admit checks r against the rules above; pattern is its route ("" when
// none), which may widen the body types.
func (s *Server) admit(r *http.Request, pattern string) error {
	if s.opts.LoopbackOnly && !loopbackHost(r.Host) && !s.allowedHost(r.Host) {
		return fail(codeHostNotAllowed, "Host "+quoteHost(r.Host)+" is not a loopback name (localhost, 127.0.0.1, [::1]) "+
			"nor one of the configured allowed_hosts; this server listens on loopback only")
	}
	if safeMethod(r.Method) {
		return nil
	}
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return fail(codeCrossOrigin, "a write from a cross-site page (Sec-Fetch-Site: cross-site) is refused")
	}
	if o := r.Header.Get("Origin"); o != "" && !s.ownOrigin(o, r.Host) {
		return fail(codeCrossOrigin, "a write from origin "+quoteHost(o)+" is refused: only the server's own origin may write")
	}
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		if r.ContentLength == 0 && len(r.TransferEncoding) == 0 {
			return nil // nothing to type
		}
		return fail(codeUnsupportedMedia, "a write with a body must send Content-Type: application/json")
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || !(jsonType(mt) || bodyTypes[pattern][mt]) {
		return fail(codeUnsupportedMedia, "Content-Type "+quoteHost(ct)+" is refused: writes must send Content-Type: application/json")
	}
	return nil
}

// jsonType: application/json or a structured JSON type (application/*+json).
func jsonType(mt string) bool {
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// hostName is the host of a Host header value or an origin's host, without
// port, brackets or a trailing dot, lower-cased.
func hostName(hostport string) string {
	h := hostport
	if hh, _, err := net.SplitHostPort(hostport); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// loopbackHost: localhost or a loopback IP literal, with or without a port.
func loopbackHost(hostport string) bool {
	h := hostName(hostport)
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

func (s *Server) allowedHost(hostport string) bool {
	h := hostName(hostport)
	for _, a := range s.opts.AllowedHosts {
		if h != "" && hostName(a) == h {
			return true
		}
	}
	return false
}

// ownOrigin: origin (scheme://host[:port]) names the host and port the
// request was sent to (Host), or an allowed host (a proxy in front of the
// server may rewrite Host). The scheme is not compared: a proxy may end TLS.
func (s *Server) ownOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return false // "null" and anything that is not an origin
	}
	if s.allowedHost(u.Host) {
		return true
	}
	return withPort(u.Host, u.Scheme) == withPort(host, u.Scheme)
}

// withPort writes host:port lower-cased with the scheme's default port
// when none is given.
func withPort(hostport, scheme string) string {
	h, p, err := net.SplitHostPort(hostport)
	if err != nil {
		h, p = hostport, map[string]string{"http": "80", "https": "443"}[scheme]
	}
	return net.JoinHostPort(hostName(h), p)
}

// quoteHost quotes a header value for a message, bounded.
func quoteHost(v string) string {
	if len(v) > 200 {
		v = v[:200]
	}
	return strconv.Quote(v)
}
