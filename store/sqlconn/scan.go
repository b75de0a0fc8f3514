package sqlconn

import (
	"fmt"
	"strconv"
)

// Int is a scan target for a page's integer columns. Scanning into a
// *uint64 or *int, database/sql formats the driver's int64 as a decimal
// string and parses it back, for every row and column; Int takes the
// driver's values as they come: int64 or uint64, or decimal text (an
// unsigned value above math.MaxInt64 in the binary protocol, a DECIMAL).
type Int[T int64 | uint64] struct{ V T }

func (n *Int[T]) Scan(src any) error {
	switch v := src.(type) {
	case int64:
		if n.V = T(v); v < 0 && n.V > 0 {
			return fmt.Errorf("sqlconn: %d out of range for %T", v, n.V)
		}
		return nil
	case uint64:
		if n.V = T(v); n.V < 0 {
			return fmt.Errorf("sqlconn: %d out of range for %T", v, n.V)
		}
		return nil
	case []byte:
		return n.parse(string(v))
	case string:
		return n.parse(v)
	}
	return fmt.Errorf("sqlconn: cannot scan %T into %T", src, n.V)
}

func (n *Int[T]) parse(s string) error {
	var err error
	switch p := any(&n.V).(type) {
	case *int64:
		*p, err = strconv.ParseInt(s, 10, 64)
	case *uint64:
		*p, err = strconv.ParseUint(s, 10, 64)
	}
	return err
}
