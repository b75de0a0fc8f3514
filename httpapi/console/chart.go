package console

import (
	"fmt"
	"strings"
	"time"

	"github.com/feedhq/feed/service"
)

// A chart is an inline SVG the server draws from the activity samples: a
// polyline per series over the last hour, scaled to the largest value.
type chart struct {
	Title  string
	Lines  []chartLine
	Top    string // the value at the top edge
	Now    string // the newest sample's values
	Empty  bool
	Window string
	// topValue is the largest value, which the top edge stands for.
	topValue float64
}

type chartLine struct {
	Class  string
	Label  string
	Points string
}

// The charts' drawing box, in SVG user units.
const chartW, chartH = 600.0, 100.0

func rowsChart(samples []service.Sample) chart {
	c := drawChart(samples, []string{"rows"}, []string{"inbox rows/s"}, func(s service.Sample) []float64 {
		return []float64{s.RowsPerSec}
	})
	c.Title = "fan-out rows/s"
	c.Top = humanCount(int64(c.topValue))
	if n := len(samples); n > 0 {
		c.Now = humanCount(int64(samples[n-1].RowsPerSec+0.5)) + " rows/s"
	}
	return c
}

func latencyChart(samples []service.Sample) chart {
	c := drawChart(samples, []string{"mean", "max"}, []string{"mean", "max"}, func(s service.Sample) []float64 {
		return []float64{s.LatencyMean.Seconds(), s.LatencyMax.Seconds()}
	})
	c.Title = "publish → visible"
	c.Top = roundDuration(time.Duration(c.topValue * float64(time.Second)))
	for _, s := range samples {
		if s.Delivered > 0 {
			c.Now = fmt.Sprintf("mean %s, max %s over %d deliveries", roundDuration(s.LatencyMean), roundDuration(s.LatencyMax), s.Delivered)
		}
	}
	return c
}

// drawChart scales every series of values over the hour ending at the
// newest sample.
func drawChart(samples []service.Sample, classes, labels []string, values func(service.Sample) []float64) chart {
	c := chart{Empty: len(samples) == 0, Window: "last hour"}
	top := 0.0
	for _, s := range samples {
		for _, v := range values(s) {
			top = max(top, v)
		}
	}
	pts := make([]strings.Builder, len(classes))
	if len(samples) > 0 {
		end := samples[len(samples)-1].At
		window := time.Hour
		for _, s := range samples {
			x := chartW - float64(end.Sub(s.At))/float64(window)*chartW
			for i, v := range values(s) {
				y := chartH
				if top > 0 {
					y = chartH - v/top*(chartH-4)
				}
				fmt.Fprintf(&pts[i], "%.1f,%.1f ", x, y)
			}
		}
	}
	for i := range classes {
		c.Lines = append(c.Lines, chartLine{Class: classes[i], Label: labels[i], Points: strings.TrimSpace(pts[i].String())})
	}
	c.topValue = top
	return c
}
