package httpapi_test

import (
	"bufio"
	"bytes"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
)

// apiDoc is the human contract. Each route it documents is a level-3
// heading holding only the route in a code span, "### `GET /v1/users/{user_id}/feed`";
// a GET route implies HEAD, which the document does not list.
const apiDoc = "../docs/API.md"

var (
	// docRoute is a route heading.
	docRoute = regexp.MustCompile("^### `([A-Z]+) (/[^` ]*)`$")
	// docRouteLike is any heading that names a method and a path, so a
	// misspelt route heading fails instead of being skipped.
	docRouteLike = regexp.MustCompile(`^#+ .*\b(GET|HEAD|POST|PUT|DELETE|PATCH|OPTIONS)\b.*/`)
)

// docRoutes parses the route headings of API.md into "METHOD /path" with
// the document's parameter names, in document order.
func docRoutes(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile(apiDoc)
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	inFence := false
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !docRouteLike.MatchString(line) {
			continue
		}
		m := docRoute.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("%s:%d: heading %q is not a route heading \"### `METHOD /path`\"", apiDoc, n, line)
			continue
		}
		route := m[1] + " " + m[2]
		switch {
		case m[1] == http.MethodHead:
			t.Errorf("%s:%d: %s: HEAD is implied by GET; document the GET route", apiDoc, n, route)
		case seen[route]:
			t.Errorf("%s:%d: %s documented twice", apiDoc, n, route)
		}
		seen[route] = true
		routes = append(routes, route)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(routes) == 0 {
		t.Fatalf("%s: no route headings", apiDoc)
	}
	return routes
}

// TestDocsMatchRoutes holds docs/API.md to the server and to openapi.json:
// every route it documents is served by New and documented in the spec
// with the same path template (parameter names included), and every route
// New serves (HEAD through its GET) is in it. That the spec documents
// exactly the served routes is TestSpecMatchesRoutes.
func TestDocsMatchRoutes(t *testing.T) {
	t.Parallel()
	served, documented := servedRoutes(t), specRoutes(t)

	inDoc := map[string]bool{}
	for _, route := range docRoutes(t) {
		method, path, _ := strings.Cut(route, " ")
		keys := []string{routeKey(method, path)}
		if method == http.MethodGet {
			keys = append(keys, routeKey(http.MethodHead, path))
		}
		for _, k := range keys {
			inDoc[k] = true
			if _, ok := served[k]; !ok {
				t.Errorf("%s documents %s, which the server does not serve", apiDoc, k)
			}
		}
		if spec, ok := documented[keys[0]]; !ok {
			t.Errorf("%s documents %s, which is not in openapi.json", apiDoc, route)
		} else if spec != route {
			t.Errorf("%s documents %s, openapi.json %s: use the same parameter names", apiDoc, route, spec)
		}
	}
	for k, r := range served {
		if !inDoc[k] {
			t.Errorf("route %s is not in %s", r, apiDoc)
		}
	}
	for k, d := range documented {
		if !inDoc[k] {
			t.Errorf("openapi.json documents %s, which is not in %s", d, apiDoc)
		}
	}
}
