//go:build !kinesub_notrace

package kinesub

// tracingBuilt is false only in a build with the tag kinesub_notrace, which compiles tracing's
// hooks on the delivery path out: the baseline `make bench` measures tracing left off against.
const tracingBuilt = true
