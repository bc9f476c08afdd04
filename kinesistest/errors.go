package kinesistest

import "fmt"

// apiError is an error answer, shaped as the service shapes it: a status code and a JSON body
// naming the exception type, which the SDK maps to its typed errors.
type apiError struct {
	status  int
	typ     string
	message string
}

func (e *apiError) Error() string { return e.typ + ": " + e.message }

func newError(status int, typ, format string, args ...any) *apiError {
	return &apiError{status: status, typ: typ, message: fmt.Sprintf(format, args...)}
}

func errNotFound(format string, args ...any) *apiError {
	return newError(400, "ResourceNotFoundException", format, args...)
}

func errInUse(format string, args ...any) *apiError {
	return newError(400, "ResourceInUseException", format, args...)
}

func errInvalid(format string, args ...any) *apiError {
	return newError(400, "InvalidArgumentException", format, args...)
}

func errValidation(format string, args ...any) *apiError {
	return newError(400, "ValidationException", format, args...)
}

func errLimit(format string, args ...any) *apiError {
	return newError(400, "LimitExceededException", format, args...)
}

func errThroughput(format string, args ...any) *apiError {
	return newError(400, "ProvisionedThroughputExceededException", format, args...)
}

func errExpired(format string, args ...any) *apiError {
	return newError(400, "ExpiredIteratorException", format, args...)
}

func errInternal(format string, args ...any) *apiError {
	return newError(500, "InternalFailureException", format, args...)
}
