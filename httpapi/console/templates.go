package console

import (
	"fmt"
	"html/template"
	"net/url"
	"strings"
	"time"

	"github.com/feedhq/feed/service"
)

// parsePages parses each page with the layout it shares: a page defines
// "title", "main" and "live" (its running state, which main includes).
func parsePages() map[string]*template.Template {
	funcs := template.FuncMap{
		"ms":       func(ms int64) string { return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05Z") },
		"time":     func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
		"ago":      func(ms int64) string { return roundDuration(time.Since(time.UnixMilli(ms))) },
		"since":    func(t time.Time) string { return roundDuration(time.Since(t)) },
		"duration": roundDuration,
		"size":     tableSize,
		"count":    humanCount,
		"rate":     func(f float64) string { return humanCount(int64(f + 0.5)) },
		"pct":      func(f float64) string { return fmt.Sprintf("%.0f%%", f*100) },
		"query":    urlQuery,
		"join":     strings.Join,
		"now":      time.Now,
		"phases":   func() []string { return service.ReshardPhases },
		"phaseState": func(current, phase string) string {
			for _, p := range service.ReshardPhases {
				switch p {
				case phase:
					if p == current {
						return "current"
					}
					return "todo"
				case current:
					return "done"
				}
			}
			return "todo"
		},
	}
	pages := map[string]*template.Template{}
	for _, name := range []string{"overview", "deliveries", "reshard", "user", "login", "error"} {
		pages[name] = template.Must(template.New("").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html"))
	}
	return pages
}

func urlQuery(s string) string { return url.QueryEscape(s) }

// roundDuration writes a duration to a precision fit for its size.
func roundDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}

// tableSize writes a table's size in KiB, or MiB past one.
func tableSize(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

func humanCount(n int64) string {
	switch {
	case n >= 10_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

type overviewPage struct {
	service.Overview
	Rows, Latency chart
}

type userPage struct {
	service.UserView
	Cursor string // of the page shown, "" for the first
}
