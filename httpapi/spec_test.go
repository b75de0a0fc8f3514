package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/feedhq/feed/httpapi"
)

// The tests hold the server to openapi.json: every response any test gets
// must be documented for its operation and match the documented schema (see
// checkResponse), and the spec's paths and methods must be exactly the
// routes New registers.

// spec is openapi.json, decoded with json.Number for numbers.
type spec struct {
	doc   map[string]any
	paths map[string]map[string]any
}

func readSpecFile() ([]byte, error) { return os.ReadFile("openapi.json") }

var loadSpec = sync.OnceValues(func() (*spec, error) {
	b, err := readSpecFile()
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := decodeJSON(b, &doc); err != nil {
		return nil, err
	}
	s := &spec{doc: doc, paths: map[string]map[string]any{}}
	paths, _ := doc["paths"].(map[string]any)
	for p, item := range paths {
		s.paths[p], _ = item.(map[string]any)
	}
	return s, nil
})

func mustSpec(t testing.TB) *spec {
	t.Helper()
	s, err := loadSpec()
	if err != nil {
		t.Fatalf("load openapi.json: %v", err)
	}
	return s
}

func decodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data")
	}
	return nil
}

var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// methods returns the upper-case methods a spec path item documents.
func methods(item map[string]any) []string {
	var out []string
	for _, m := range httpMethods {
		if _, ok := item[m]; ok {
			out = append(out, strings.ToUpper(m))
		}
	}
	return out
}

// match returns the spec path template that urlPath instantiates, or "".
func (s *spec) match(urlPath string) string {
	segs := strings.Split(urlPath, "/")
	for tmpl := range s.paths {
		ts := strings.Split(tmpl, "/")
		if len(ts) != len(segs) {
			continue
		}
		ok := true
		for i := range ts {
			isParam := strings.HasPrefix(ts[i], "{") && strings.HasSuffix(ts[i], "}")
			if (isParam && segs[i] == "") || (!isParam && ts[i] != segs[i]) {
				ok = false
				break
			}
		}
		if ok {
			return tmpl
		}
	}
	return ""
}

// resolve follows a local $ref.
func (s *spec) resolve(node any) map[string]any {
	m, _ := node.(map[string]any)
	for m != nil {
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		var cur any = s.doc
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			cur = cur.(map[string]any)[part]
		}
		m, _ = cur.(map[string]any)
	}
	return m
}

// validate checks v against the subset of OpenAPI 3.0 schema keywords the
// spec uses, and fails on any other keyword so the subset cannot drift.
func (s *spec) validate(at string, schema any, v any) error {
	sch := s.resolve(schema)
	if sch == nil {
		return fmt.Errorf("%s: no schema", at)
	}
	if v == nil {
		if sch["nullable"] == true {
			return nil
		}
		if _, typed := sch["type"]; typed {
			return fmt.Errorf("%s: null", at)
		}
	}
	for kw := range sch {
		switch kw {
		case "type", "nullable", "description", "example", "default", "format", "pattern", "enum",
			"minimum", "maximum", "required", "properties", "additionalProperties", "items", "maxItems",
			"oneOf", "allOf":
		default:
			return fmt.Errorf("%s: schema keyword %q not supported by the test validator", at, kw)
		}
	}
	if subs, ok := sch["allOf"].([]any); ok {
		for _, sub := range subs {
			if err := s.validate(at, sub, v); err != nil {
				return err
			}
		}
	}
	if subs, ok := sch["oneOf"].([]any); ok {
		n := 0
		for _, sub := range subs {
			if s.validate(at, sub, v) == nil {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("%s: %v matches %d of oneOf", at, v, n)
		}
	}
	if enum, ok := sch["enum"].([]any); ok && !slices.Contains(enum, v) {
		return fmt.Errorf("%s: %v not in %v", at, v, enum)
	}
	switch sch["type"] {
	case nil:
	case "string":
		str, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s: want string, got %T", at, v)
		}
		if p, ok := sch["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(str) {
			return fmt.Errorf("%s: %q does not match %s", at, str, p)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: want boolean, got %T", at, v)
		}
	case "integer":
		num, ok := v.(json.Number)
		n, isInt := new(big.Int).SetString(string(num), 10)
		if !ok || !isInt {
			return fmt.Errorf("%s: want integer, got %v", at, v)
		}
		if lim, ok := sch["minimum"].(json.Number); ok && n.Cmp(bigOf(lim)) < 0 {
			return fmt.Errorf("%s: %s below minimum %s", at, n, lim)
		}
		if lim, ok := sch["maximum"].(json.Number); ok && n.Cmp(bigOf(lim)) > 0 {
			return fmt.Errorf("%s: %s above maximum %s", at, n, lim)
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: want array, got %T", at, v)
		}
		if lim, ok := sch["maxItems"].(json.Number); ok && int64(len(arr)) > bigOf(lim).Int64() {
			return fmt.Errorf("%s: %d items, more than %s", at, len(arr), lim)
		}
		for i, it := range arr {
			if err := s.validate(fmt.Sprintf("%s[%d]", at, i), sch["items"], it); err != nil {
				return err
			}
		}
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: want object, got %T", at, v)
		}
		props, _ := sch["properties"].(map[string]any)
		for _, r := range asSlice(sch["required"]) {
			if _, ok := obj[r.(string)]; !ok {
				return fmt.Errorf("%s: missing %q", at, r)
			}
		}
		for k, val := range obj {
			p, ok := props[k]
			if !ok {
				switch extra := sch["additionalProperties"].(type) {
				case bool:
					if !extra {
						return fmt.Errorf("%s: unexpected member %q", at, k)
					}
					continue
				case map[string]any:
					p = extra // a map: every other member has this schema
				default:
					continue
				}
			}
			if err := s.validate(at+"."+k, p, val); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("%s: type %v not supported by the test validator", at, sch["type"])
	}
	return nil
}

func bigOf(n json.Number) *big.Int {
	b, ok := new(big.Int).SetString(string(n), 10)
	if !ok {
		panic("not an integer: " + n)
	}
	return b
}

func asSlice(v any) []any { s, _ := v.([]any); return s }

// checkResponse holds one response to the spec. tokenProtected says the
// server requires a token, so any /v1 request may be answered 401.
func checkResponse(t testing.TB, method, urlPath string, r resp, tokenProtected bool) {
	t.Helper()
	s := mustSpec(t)
	where := method + " " + urlPath
	isV1 := urlPath == "/v1" || strings.HasPrefix(urlPath, "/v1/")
	tmpl := s.match(urlPath)
	var op map[string]any
	if tmpl != "" {
		op, _ = s.paths[tmpl][strings.ToLower(method)].(map[string]any)
	}
	switch {
	case r.status == http.StatusUnauthorized && tokenProtected && isV1:
		if got := r.header.Get("WWW-Authenticate"); got != `Bearer realm="feed"` {
			t.Errorf("%s: 401 with WWW-Authenticate %q", where, got)
		}
		if op != nil {
			if _, ok := s.resolve(op["responses"])["401"]; !ok {
				t.Errorf("%s: 401 not documented", where)
			}
		}
		checkErrorBody(t, where, method, r, "unauthorized")
	case tmpl == "":
		if r.status != http.StatusNotFound {
			t.Errorf("%s: no such path in the spec, got %d, want 404", where, r.status)
		}
		checkErrorBody(t, where, method, r, "not_found")
	case op == nil && method == http.MethodOptions:
		if r.status != http.StatusNoContent {
			t.Errorf("%s: OPTIONS got %d, want 204", where, r.status)
		}
		checkAllow(t, where, r, s.paths[tmpl])
	case op == nil:
		if r.status != http.StatusMethodNotAllowed {
			t.Errorf("%s: method not in the spec, got %d, want 405", where, r.status)
		}
		checkAllow(t, where, r, s.paths[tmpl])
		checkErrorBody(t, where, method, r, "invalid_argument")
	case r.status == http.StatusTooManyRequests && isV1:
		for _, h := range rateLimitHeaders {
			if r.header.Get(h) == "" {
				t.Errorf("%s: 429 without %s", where, h)
			}
		}
		checkErrorBody(t, where, method, r, "rate_limited")
	case r.status == http.StatusRequestEntityTooLarge:
		// Documented globally: any route refuses bodies over the limit.
		checkErrorBody(t, where, method, r, "payload_too_large")
	default:
		responses := s.resolve(op["responses"])
		doc := s.resolve(responses[fmt.Sprint(r.status)])
		if doc == nil {
			t.Errorf("%s: status %d not documented (body %s)", where, r.status, r.body)
			return
		}
		content, _ := doc["content"].(map[string]any)
		if method == http.MethodHead || content == nil {
			if len(r.body) != 0 {
				t.Errorf("%s: %d with body %q, want none", where, r.status, r.body)
			}
			return
		}
		media, ok := content["application/json"].(map[string]any)
		if !ok {
			return // text: /metrics
		}
		if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("%s: Content-Type %q", where, ct)
		}
		var v any
		if err := decodeJSON(r.body, &v); err != nil {
			t.Errorf("%s: body is not JSON: %v: %s", where, err, r.body)
			return
		}
		if err := s.validate("body", media["schema"], v); err != nil {
			t.Errorf("%s: %d does not match the spec: %v\n%s", where, r.status, err, r.body)
		}
	}
}

func checkErrorBody(t testing.TB, where, method string, r resp, code string) {
	t.Helper()
	if method == http.MethodHead {
		if len(r.body) != 0 {
			t.Errorf("%s: HEAD error with body %q", where, r.body)
		}
		return
	}
	s := mustSpec(t)
	var v any
	if err := decodeJSON(r.body, &v); err != nil {
		t.Errorf("%s: %d error body is not JSON: %v: %q", where, r.status, err, r.body)
		return
	}
	if err := s.validate("body", map[string]any{"$ref": "#/components/schemas/Error"}, v); err != nil {
		t.Errorf("%s: error body: %v", where, err)
		return
	}
	if got := v.(map[string]any)["error"].(map[string]any)["code"]; got != code {
		t.Errorf("%s: error code %v, want %s", where, got, code)
	}
}

// checkAllow wants the Allow header to name exactly the methods the spec
// documents for the path, plus OPTIONS.
func checkAllow(t testing.TB, where string, r resp, item map[string]any) {
	t.Helper()
	want := append(methods(item), http.MethodOptions)
	var got []string
	for _, m := range strings.Split(r.header.Get("Allow"), ",") {
		got = append(got, strings.TrimSpace(m))
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("%s: Allow %q, want %v", where, r.header.Get("Allow"), want)
	}
}

// Path parameters: echo's ":id" and the spec's "{author_id}".
var echoParam = regexp.MustCompile(`:[a-z_]+`)
var specParam = regexp.MustCompile(`\{[a-z_]+\}`)

// routeKey names a route as "METHOD /path" with every path parameter as
// "{}", so echo's and the spec's spellings compare by position.
func routeKey(method, path string) string {
	return method + " " + specParam.ReplaceAllString(echoParam.ReplaceAllString(path, "{}"), "{}")
}

// servedRoutes returns the routes New registers, by routeKey, each with
// the echo path it was registered as.
func servedRoutes(t testing.TB) map[string]string {
	t.Helper()
	e := httpapi.New(nil, httpapi.Options{})
	served := map[string]string{}
	for _, r := range e.Routes() {
		if r.Method == echo.RouteNotFound {
			continue // echo's own catch-all routes
		}
		served[routeKey(r.Method, r.Path)] = r.Method + " " + r.Path
	}
	if len(served) == 0 {
		t.Fatal("no routes registered")
	}
	return served
}

// specRoutes returns the operations openapi.json documents, by routeKey,
// each as "METHOD template" with the spec's parameter names.
func specRoutes(t testing.TB) map[string]string {
	t.Helper()
	documented := map[string]string{}
	for tmpl, item := range mustSpec(t).paths {
		for _, m := range methods(item) {
			documented[routeKey(m, tmpl)] = m + " " + tmpl
		}
	}
	return documented
}

// TestSpecMatchesRoutes checks that openapi.json documents exactly the
// routes New registers: each route's method on its path (parameters compared
// by position), and nothing more.
func TestSpecMatchesRoutes(t *testing.T) {
	t.Parallel()
	served, documented := servedRoutes(t), specRoutes(t)
	for k, r := range served {
		if _, ok := documented[k]; !ok {
			t.Errorf("route %s is not in openapi.json", r)
		}
	}
	for k, d := range documented {
		if _, ok := served[k]; !ok {
			t.Errorf("openapi.json documents %s, which is not a route", d)
		}
	}
}

// rateLimitHeaders are the headers of a 429.
var rateLimitHeaders = []string{"Retry-After", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}

// TestSpecDocument checks the document's own shape: version, that every
// $ref resolves, that each path parameter is declared, that every /v1
// operation asks for the bearer token and documents 401 and 403, 503 with
// its Retry-After header and 429 with the rate limit's, and that every
// operation with a body documents 413.
func TestSpecDocument(t *testing.T) {
	t.Parallel()
	s := mustSpec(t)
	if s.doc["openapi"] != "3.0.3" {
		t.Errorf("openapi = %v, want 3.0.3", s.doc["openapi"])
	}
	var walk func(at string, n any)
	walk = func(at string, n any) {
		switch n := n.(type) {
		case map[string]any:
			if ref, ok := n["$ref"].(string); ok {
				func() {
					defer func() {
						if recover() != nil {
							t.Errorf("%s: $ref %s does not resolve", at, ref)
						}
					}()
					if s.resolve(n) == nil {
						t.Errorf("%s: $ref %s does not resolve", at, ref)
					}
				}()
			}
			for k, v := range n {
				walk(at+"/"+k, v)
			}
		case []any:
			for i, v := range n {
				walk(fmt.Sprintf("%s/%d", at, i), v)
			}
		}
	}
	walk("#", s.doc)

	for tmpl, item := range s.paths {
		declared := map[string]bool{}
		for _, p := range asSlice(item["parameters"]) {
			if p := s.resolve(p); p["in"] == "path" {
				declared[p["name"].(string)] = true
			}
		}
		for _, name := range specParam.FindAllString(tmpl, -1) {
			if !declared[strings.Trim(name, "{}")] {
				t.Errorf("%s: path parameter %s not declared", tmpl, name)
			}
		}
		for _, m := range methods(item) {
			op := item[strings.ToLower(m)].(map[string]any)
			if _, ok := op["operationId"].(string); !ok {
				t.Errorf("%s %s: no operationId", m, tmpl)
			}
			responses := s.resolve(op["responses"])
			if strings.HasPrefix(tmpl, "/v1/") {
				sec, _ := json.Marshal(op["security"])
				if string(sec) != `[{"bearerAuth":[]}]` {
					t.Errorf("%s %s: security %s, want bearerAuth", m, tmpl, sec)
				}
				for _, code := range []string{"400", "401", "403", "429", "500", "503"} {
					if _, ok := responses[code]; !ok {
						t.Errorf("%s %s: status %s not documented", m, tmpl, code)
					}
				}
				headers, _ := s.resolve(responses["503"])["headers"].(map[string]any)
				if _, ok := headers["Retry-After"]; !ok {
					t.Errorf("%s %s: 503 without the Retry-After header", m, tmpl)
				}
				headers, _ = s.resolve(responses["429"])["headers"].(map[string]any)
				for _, h := range rateLimitHeaders {
					if _, ok := headers[h]; !ok {
						t.Errorf("%s %s: 429 without the %s header", m, tmpl, h)
					}
				}
			}
			if _, ok := op["requestBody"]; ok {
				if _, ok := responses["413"]; !ok {
					t.Errorf("%s %s: has a body but does not document 413", m, tmpl)
				}
			}
		}
	}
}

// TestSpecFeedPage holds the feed's page schema to the partial pages no
// single-database test gets: partial only as true, the missing authors as
// id strings; and top_cursor always present.
func TestSpecFeedPage(t *testing.T) {
	t.Parallel()
	s := mustSpec(t)
	schema := map[string]any{"$ref": "#/components/schemas/FeedPage"}
	for body, valid := range map[string]bool{
		`{"items":[],"next_cursor":null,"top_cursor":null}`: true,
		`{"items":[],"next_cursor":null}`:                   false,
		`{"items":[],"next_cursor":"AWYAAAGJRZS9OAAAAAAAAIBT","top_cursor":null,"partial":true,"missing_authors":["12","34"]}`: true,
		`{"items":[],"next_cursor":null,"partial":false,"missing_authors":["12"]}`:                                             false,
		`{"items":[],"next_cursor":null,"partial":true,"missing_authors":[12]}`:                                                false,
		`{"items":[],"next_cursor":null,"partial":"true","missing_authors":["12"]}`:                                            false,
	} {
		var v any
		if err := decodeJSON([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		if err := s.validate("body", schema, v); (err == nil) != valid {
			t.Errorf("%s: validation error %v, want valid=%v", body, err, valid)
		}
	}
}
