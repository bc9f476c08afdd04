package kinesub

import "fmt"

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

// checkStreamName rejects a stream name the service would refuse, naming what the caller
// (Subscribe, NewPublisher) was given.
func checkStreamName(caller, name string) error {
	if !validName(name) {
		return optionError(caller+" stream", fmt.Sprintf("%q", name), "must be 1 to 128 characters of letters, digits, '_', '.' or '-'")
	}
	return nil
}
