package feed

import (
	"errors"
	"fmt"
)

// Error codes shared by every layer. The HTTP layer maps each one to a status;
// anything that is not a *Error is reported as EINTERNAL.
const (
	EINVALID      = "invalid_argument"
	EUNAUTHORIZED = "unauthorized"
	EFORBIDDEN    = "forbidden"
	ENOTFOUND     = "not_found"
	ECONFLICT     = "conflict"
	ELIMIT        = "limit_exceeded"
	ESESSION      = "session_expired"
	ETOOLARGE     = "payload_too_large"
	ERATELIMITED  = "rate_limited"
	// ESTREAMS: a user or the process holds as many feed streams open as
	// it may; one must close before another opens.
	ESTREAMS     = "too_many_streams"
	EUNAVAILABLE = "unavailable"
	EINTERNAL    = "internal"
)

// Error is an error a client can act on: a code from the list above and a
// message safe to show.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("feed error: code=%s message=%s", e.Code, e.Message)
}

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, "" for nil
// and EINTERNAL for any other error.
func ErrorCode(err error) string {
	var e *Error
	if err == nil {
		return ""
	} else if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the message of the first *Error in err's chain, and a
// generic text for any other error so internals never reach clients.
func ErrorMessage(err error) string {
	var e *Error
	if err == nil {
		return ""
	} else if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}
