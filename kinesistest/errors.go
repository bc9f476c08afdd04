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

// errTooLarge answers a request whose body is over maxRequestBody. The service answers a
// request over its size limit with status 413 and no exception type (users see "An error
// occurred (413)", boto/boto3#1147). Here the answer is a 413 too, typed SerializationException
// (the service's type for a body it cannot read) so that the SDK shows its message, which
// names the limit.
func errTooLarge(op string) *apiError {
	return newError(413, "SerializationException",
		"%s request body exceeds the server's limit of %d bytes (16 MiB); a valid request is smaller: a record holds at most 1 MiB of data (10 MiB where the stream's limit was raised), a PutRecords call 5 MiB", op, maxRequestBody)
}
