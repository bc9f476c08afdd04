package kinesub

import (
	"fmt"
	"slices"
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

// partitions are the AWS partitions a stream ARN may name, as the SDK's endpoint rules list them
// (aws-sdk-go-v2 internal/endpoints/awsrulesfn/partitions.json).
var partitions = []string{"aws", "aws-cn", "aws-us-gov", "aws-iso", "aws-iso-b", "aws-iso-e", "aws-iso-f", "aws-eusc"}

// streamRef is how the caller named a stream: by name, or by ARN
// ("arn:<partition>:kinesis:<region>:<account>:stream/<name>", needed to reach a stream of
// another account). Either way name is the stream's name, which lease keys, errors and logs
// use, so that instances configured by name and by ARN share one set of leases.
type streamRef struct {
	name    string
	arn     string // "" when given a name
	region  string // the ARN's; "" when given a name
	account string // the ARN's; "" when given a name
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
	ref, problem := parseARN(s)
	if problem != "" {
		return streamRef{}, optionError(caller+" stream", fmt.Sprintf("%q", s), problem+": must be arn:<partition>:kinesis:<region>:<12-digit account>:stream/<name>, the partition one of "+strings.Join(partitions, ", ")+", the name 1 to 128 characters of letters, digits, '_', '.' or '-'")
	}
	return ref, nil
}

// parseARN reads a Kinesis stream ARN, or says what is wrong with it.
func parseARN(arn string) (streamRef, string) {
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "kinesis" {
		return streamRef{}, "not a Kinesis ARN"
	}
	if !slices.Contains(partitions, parts[1]) {
		return streamRef{}, fmt.Sprintf("no AWS partition %q", parts[1])
	}
	region, account := parts[3], parts[4]
	if region == "" || strings.Trim(region, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
		return streamRef{}, fmt.Sprintf("bad region %q", region)
	}
	if len(account) != 12 || strings.Trim(account, "0123456789") != "" {
		return streamRef{}, fmt.Sprintf("bad account %q", account)
	}
	name, ok := strings.CutPrefix(parts[5], "stream/")
	if !ok || !validName(name) {
		return streamRef{}, fmt.Sprintf("not a stream: %q", parts[5])
	}
	return streamRef{name: name, arn: arn, region: region, account: account}, ""
}

// creatable reports whether WithCreateIfMissing may create the stream: by name always; by ARN
// only when the ARN's region is the client's (clientRegion "" when unknown), since the stream
// is created by name in the client's own account and region.
func (r streamRef) creatable(clientRegion string) bool {
	return r.arn == "" || clientRegion == "" || clientRegion == r.region
}

// notFound is Subscribe's error for a stream that does not exist. Given by ARN, it names the
// ARN and what to check: a stream of another region or account is not one WithCreateIfMissing
// can create. created: WithCreateIfMissing created a stream of that name, which is not the
// ARN's.
func (r streamRef) notFound(clientRegion string, created bool, err error) error {
	if r.arn == "" {
		return fmt.Errorf("%w: %s (create it, or pass WithCreateIfMissing): %w", ErrStreamNotFound, r.name, err)
	}
	var hint string
	switch {
	case clientRegion != "" && clientRegion != r.region:
		hint = fmt.Sprintf("the client is configured for region %s and sends its calls there, the ARN names region %s: configure the client for %s", clientRegion, r.region, r.region)
	default:
		hint = fmt.Sprintf("check the ARN's region (%s) and account (%s), and that the client's credentials may read streams of that account", r.region, r.account)
	}
	create := "WithCreateIfMissing creates streams by name in the client's own account and region, not this ARN"
	if created {
		create = fmt.Sprintf("WithCreateIfMissing created a stream %s in the client's own account and region, which is not this ARN", r.name)
	}
	return fmt.Errorf("%w: %s (%s; %s): %w", ErrStreamNotFound, r.arn, hint, create, err)
}
