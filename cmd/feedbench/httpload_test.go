package main

import (
	"bufio"
	"strings"
	"testing"
)

func TestHTTPLoadReadsResponses(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		body    string
		wantErr bool
	}{
		{"content length", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello", "hello", false},
		{"chunked with extension and trailer", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3;x=y\r\nhel\r\n2\r\nlo\r\n0\r\nT: v\r\n\r\n", "hello", false},
		{"bare LF lines", "HTTP/1.1 200 OK\nContent-Length: 2\n\nhi", "hi", false},
		{"not 200", "HTTP/1.1 400 Bad Request\r\nContent-Length: 3\r\n\r\nbad", "", true},
		{"no content", "HTTP/1.1 204 No Content\r\n\r\n", "", true},
		{"no framing", "HTTP/1.1 200 OK\r\n\r\nhello", "", true},
		{"bad chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "", true},
		{"short body", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhello", "", true},
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi", "", true},
		{"not HTTP/1.1", "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw := tc.raw
			if !tc.wantErr {
				raw += raw
			}
			c := &httpConn{r: bufio.NewReader(strings.NewReader(raw))}
			for range 2 { // the second read proves the first consumed exactly its response
				body, err := c.readOK()
				if tc.wantErr {
					if err == nil {
						t.Fatalf("read %q, want an error", body)
					}
					return
				}
				if err != nil || string(body) != tc.body {
					t.Fatalf("got %q, %v; want %q", body, err, tc.body)
				}
			}
		})
	}
}

func TestScanPage(t *testing.T) {
	item := `{"content_id":"1","author_id":"2","publish_time":3,"kind":"post"}`
	tests := []struct {
		name    string
		body    string
		next    string
		items   int
		wantErr bool
	}{
		{"last page", `{"items":[` + item + `],"next_cursor":null}` + "\n", "", 1, false},
		{"next page", `{"items":[` + item + "," + item + `],"next_cursor":"eyJ0Ijox"}` + "\n", "eyJ0Ijox", 2, false},
		{"empty", `{"items":[],"next_cursor":null}`, "", 0, false},
		{"error body", `{"code":"invalid","message":"m"}`, "", 0, true},
		{"unterminated cursor", `{"items":[],"next_cursor":"abc`, "", 0, true},
		{"bad cursor value", `{"items":[],"next_cursor":7}`, "", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			next, items, err := scanPage([]byte(tc.body))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err == nil && (next != tc.next || items != tc.items) {
				t.Fatalf("got %q, %d items; want %q, %d", next, items, tc.next, tc.items)
			}
		})
	}
}
