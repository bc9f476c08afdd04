// Package kinesub consumes Amazon Kinesis Data Streams.
package kinesub
