package console

import (
	"fmt"
	"strconv"
	"time"

	"github.com/feedhq/feed/service"
)

// A chart is an inline SVG the server draws from the activity samples: a
// bar per sample and series over the last hour, scaled to the largest
// value. Bars show a single sample as well as many.
type chart struct {
	Title  string
	Series []series
	Top    string // the value at the top edge
	Now    string // the newest sample's values
	Empty  bool
	Window string
	// topValue is the largest value, which the top edge stands for.
	topValue float64
}

type series struct {
	Class string
	Label string
	Bars  []bar
}

// bar is one sample's bar in SVG user units.
type bar struct{ X, Y, W, H string }

// The charts' drawing box, in SVG user units.
const chartW, chartH = 600.0, 100.0

func rowsChart(samples []service.Sample) chart {
	c := drawChart(samples, []string{"rows"}, []string{"inbox rows/s"}, func(s service.Sample) []float64 {
		return []float64{s.RowsPerSec}
	})
	c.Title = "fan-out rows/s"
	c.Top = humanCount(int64(c.topValue + 0.5))
	if n := len(samples); n > 0 {
		c.Now = "now " + humanCount(int64(samples[n-1].RowsPerSec+0.5)) + " rows/s"
	}
	return c
}

// latencyChart draws each interval's slowest delivery behind its mean.
func latencyChart(samples []service.Sample) chart {
	c := drawChart(samples, []string{"max", "mean"}, []string{"max", "mean"}, func(s service.Sample) []float64 {
		return []float64{s.LatencyMax.Seconds(), s.LatencyMean.Seconds()}
	})
	c.Title = "publish → visible"
	c.Top = roundDuration(time.Duration(c.topValue * float64(time.Second)))
	for _, s := range samples {
		if s.Delivered > 0 {
			c.Now = fmt.Sprintf("latest: mean %s, max %s over %d deliveries", roundDuration(s.LatencyMean), roundDuration(s.LatencyMax), s.Delivered)
		}
	}
	return c
}

// drawChart scales every series of values over the hour ending at the
// newest sample.
func drawChart(samples []service.Sample, classes, labels []string, values func(service.Sample) []float64) chart {
	c := chart{Empty: len(samples) == 0, Window: "last hour"}
	for _, s := range samples {
		for _, v := range values(s) {
			c.topValue = max(c.topValue, v)
		}
	}
	for i := range classes {
		c.Series = append(c.Series, series{Class: classes[i], Label: labels[i]})
	}
	if len(samples) == 0 {
		return c
	}
	end := samples[len(samples)-1].At
	w := max(chartW*float64(service.ActivityEvery)/float64(time.Hour), 2)
	for _, s := range samples {
		x := chartW - w - float64(end.Sub(s.At))/float64(time.Hour)*chartW
		for i, v := range values(s) {
			h := 0.0
			if c.topValue > 0 {
				h = v / c.topValue * (chartH - 2)
			}
			c.Series[i].Bars = append(c.Series[i].Bars, bar{X: num(x), Y: num(chartH - h), W: num(w), H: num(h)})
		}
	}
	return c
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }
