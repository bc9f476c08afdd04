//go:build kinesub_notrace

package kinesub

// tracingBuilt: see tracing_built.go. This build is for the tracing benchmark's baseline only.
const tracingBuilt = false
