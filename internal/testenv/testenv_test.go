package testenv

import "testing"

func TestCheckLoopback(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"http://127.0.0.1:4567", true},
		{"http://localhost:4567", true},
		{"http://[::1]:4568", true},
		{"http://127.1.2.3:80", true},
		{"https://kinesis.us-east-1.amazonaws.com", false},
		{"http://10.0.0.1:4567", false},
		{"http://192.168.1.5:4567", false},
		{"ftp://127.0.0.1", false},
		{"", false},
		{"::not a url", false},
	} {
		err := CheckLoopback(tc.url)
		if (err == nil) != tc.ok {
			t.Errorf("CheckLoopback(%q) = %v, want ok=%v", tc.url, err, tc.ok)
		}
	}
}
