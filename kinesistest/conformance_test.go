package kinesistest_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub/internal/testenv"
	"github.com/gostream/kinesub/kinesistest"
	"github.com/gostream/kinesub/kinesistest/internal/conformance"
)

// TestConformance holds kinesistest and kinesalite to the same behaviour, and kinesistest
// alone to what kinesalite lacks.
func TestConformance(t *testing.T) {
	t.Run("kinesistest", func(t *testing.T) {
		srv := kinesistest.NewServer()
		t.Cleanup(srv.Close)
		client := srv.Client()
		conformance.Run(t, conformance.Backend{
			Client: func(*testing.T) *kinesis.Client { return client },
			Server: func(t *testing.T, opts ...kinesistest.Option) *kinesistest.Server {
				s := kinesistest.NewServer(opts...)
				t.Cleanup(s.Close)
				return s
			},
		})
	})
	t.Run("kinesalite", func(t *testing.T) {
		conformance.Run(t, conformance.Backend{Client: func(t *testing.T) *kinesis.Client { return testenv.Kinesis(t) }})
	})
}
