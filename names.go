package kinesub

import (
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// validName reports whether s can name a stream or a shard: 1 to 128 characters of letters,
// digits, '_', '.' and '-'.
func validName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			return false
		}
	}
	return true
}

// streamRef is how the caller named a stream: by name, or by ARN
// ("arn:<partition>:kinesis:<region>:<account>:stream/<name>", needed to reach a stream of
// another account). Either way name is the stream's name, which lease keys, errors and logs
// use, so that instances configured by name and by ARN share one set of leases.
type streamRef struct {
	name string
	arn  string // "" when given a name
}

// streamName is the StreamName parameter of a call: always the name. The service takes the name,
// the ARN, or both; given an ARN, both are sent (the ARN decides the account and region).
func (r streamRef) streamName() *string { return aws.String(r.name) }

// streamARN is the StreamARN parameter of a call: the ARN when given one, else unset.
func (r streamRef) streamARN() *string {
	if r.arn == "" {
		return nil
	}
	return aws.String(r.arn)
}

// parseStream reads a stream name or a stream ARN, rejecting what the service would refuse and
// naming what the caller (Subscribe, NewPublisher) was given.
func parseStream(caller, s string) (streamRef, error) {
	if !strings.HasPrefix(s, "arn:") {
		if !validName(s) {
			return streamRef{}, optionError(caller+" stream", fmt.Sprintf("%q", s), "must be a stream ARN, or 1 to 128 characters of letters, digits, '_', '.' or '-'")
		}
		return streamRef{name: s}, nil
	}
	name, ok := arnStreamName(s)
	if !ok {
		return streamRef{}, optionError(caller+" stream", fmt.Sprintf("%q", s), "must be arn:<partition>:kinesis:<region>:<12-digit account>:stream/<name>, the name 1 to 128 characters of letters, digits, '_', '.' or '-'")
	}
	return streamRef{name: name, arn: s}, nil
}

// arnStreamName returns the stream name of a Kinesis stream ARN.
func arnStreamName(arn string) (string, bool) {
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || !strings.HasPrefix(parts[1], "aws") || parts[2] != "kinesis" {
		return "", false
	}
	region, account := parts[3], parts[4]
	if region == "" || strings.Trim(region, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
		return "", false
	}
	if len(account) != 12 || strings.Trim(account, "0123456789") != "" {
		return "", false
	}
	name, ok := strings.CutPrefix(parts[5], "stream/")
	if !ok || !validName(name) {
		return "", false
	}
	return name, true
}
