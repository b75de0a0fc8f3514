package store

import (
	"fmt"
	"strconv"
)

// Integer scan targets for a page's rows. Scanning into a *uint64 or *int,
// database/sql formats the driver's int64 as a decimal string and parses it
// back, twice per row and column; these take the driver's values as they
// come: int64 from the binary protocol (an unsigned value above
// math.MaxInt64 as its decimal text), text from the other.
type (
	scanUint uint64
	scanInt  int64
)

func (u *scanUint) Scan(src any) error {
	switch v := src.(type) {
	case int64:
		*u = scanUint(v)
	case uint64:
		*u = scanUint(v)
	case []byte:
		n, err := strconv.ParseUint(string(v), 10, 64)
		*u = scanUint(n)
		return err
	case string:
		n, err := strconv.ParseUint(v, 10, 64)
		*u = scanUint(n)
		return err
	default:
		return fmt.Errorf("store: cannot scan %T into an unsigned integer", src)
	}
	return nil
}

func (i *scanInt) Scan(src any) error {
	switch v := src.(type) {
	case int64:
		*i = scanInt(v)
	case []byte:
		n, err := strconv.ParseInt(string(v), 10, 64)
		*i = scanInt(n)
		return err
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		*i = scanInt(n)
		return err
	default:
		return fmt.Errorf("store: cannot scan %T into an integer", src)
	}
	return nil
}
