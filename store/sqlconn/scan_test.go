package sqlconn_test

import (
	"math"
	"testing"

	"github.com/feedhq/feed/store/sqlconn"
)

// TestScanIntegers covers what the driver hands over: int64 or uint64, or
// decimal text (an unsigned value above math.MaxInt64 in the binary
// protocol), and refuses what does not fit.
func TestScanIntegers(t *testing.T) {
	for _, c := range []struct {
		src  any
		want uint64
	}{
		{int64(42), 42},
		{uint64(math.MaxUint64), math.MaxUint64},
		{[]byte("18446744073709551615"), math.MaxUint64},
		{"7", 7},
	} {
		var u sqlconn.Int[uint64]
		if err := u.Scan(c.src); err != nil || u.V != c.want {
			t.Errorf("Int[uint64].Scan(%#v) = %d, %v; want %d", c.src, u.V, err, c.want)
		}
	}
	for _, c := range []struct {
		src  any
		want int64
	}{
		{int64(-3), -3},
		{[]byte("9223372036854775807"), math.MaxInt64},
		{"-1", -1},
	} {
		var i sqlconn.Int[int64]
		if err := i.Scan(c.src); err != nil || i.V != c.want {
			t.Errorf("Int[int64].Scan(%#v) = %d, %v; want %d", c.src, i.V, err, c.want)
		}
	}
	var u sqlconn.Int[uint64]
	if err := u.Scan(1.5); err == nil {
		t.Error("Int[uint64].Scan(1.5): no error")
	}
	if err := u.Scan([]byte("-1")); err == nil {
		t.Error(`Int[uint64].Scan("-1"): no error`)
	}
	if err := u.Scan(int64(-1)); err == nil {
		t.Error("Int[uint64].Scan(int64(-1)): no error")
	}
	var i sqlconn.Int[int64]
	if err := i.Scan(uint64(math.MaxUint64)); err == nil {
		t.Error("Int[int64].Scan(uint64(math.MaxUint64)): no error")
	}
}
