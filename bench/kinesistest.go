package main

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gostream/kinesub/kinesistest"
)

// serverFigures measures kinesistest against kinesalite with the same raw GetRecords loop over
// streams of the same shape, passes alternating, and then kinesub against that loop on
// kinesistest, where the emulator's cost no longer hides the library's. Both servers' CPU is
// in the figures on kinesistest (it runs in this process), the same for the loop and kinesub.
func serverFigures(kinesalite *kinesis.Client) error {
	fmt.Println("\n== kinesistest, the in-process server, against kinesalite ==")
	ctx := context.Background()
	srv := kinesistest.NewServer()
	defer srv.Close()
	local := srv.Client()
	stream := fmt.Sprintf("kinesub-bench-kt-%d", time.Now().UnixNano())
	servers := []struct {
		name   string
		client *kinesis.Client
		shards []string
	}{{name: "kinesalite", client: kinesalite}, {name: "kinesistest", client: local}}
	for i := range servers {
		s := &servers[i]
		shards, err := createStream(ctx, s.client, stream, int32(*shardCount))
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = s.client.DeleteStream(dctx, &kinesis.DeleteStreamInput{StreamName: aws.String(stream), EnforceConsumerDeletion: aws.Bool(true)})
		}()
		s.shards = shards
		if err := publish(ctx, s.client, stream, *records, *recordSize); err != nil {
			return fmt.Errorf("%s: publish: %w", s.name, err)
		}
	}
	var ratios []float64
	var kl, kt []pass
	for i := range *pairs {
		a, err := rawPass(ctx, kinesalite, stream, servers[0].shards, *records)
		if err != nil {
			return fmt.Errorf("kinesalite raw pass %d: %w", i+1, err)
		}
		b, err := rawPass(ctx, local, stream, servers[1].shards, *records)
		if err != nil {
			return fmt.Errorf("kinesistest raw pass %d: %w", i+1, err)
		}
		kl, kt = append(kl, a), append(kt, b)
		ratios = append(ratios, b.rate()/a.rate())
		fmt.Printf("  pair %d: kinesalite %8.0f records/s | kinesistest %8.0f records/s\n", i+1, a.rate(), b.rate())
	}
	rates := func(ps []pass) float64 {
		var xs []float64
		for _, p := range ps {
			xs = append(xs, p.rate())
		}
		return median(xs)
	}
	fmt.Printf("%d pairs, medians; the raw GetRecords loop of the end-to-end figures, %d × %d B records over %d shards\n", *pairs, *records, *recordSize, *shardCount)
	fmt.Printf("  GetRecords records/s kinesistest ÷ kinesalite  %6.1f (%.0f ÷ %.0f)  goal ≥ 10: %s\n", median(ratios), rates(kt), rates(kl), verdict(median(ratios) >= 10))

	styles := []string{"messages", "all", "batches"}
	rateRatios, cpuRatios := map[string][]float64{}, map[string][]float64{}
	for i := range *pairs {
		r, err := rawPass(ctx, local, stream, servers[1].shards, *records)
		if err != nil {
			return fmt.Errorf("kinesistest raw pass %d: %w", i+1, err)
		}
		line := fmt.Sprintf("  round %d: raw %8.0f/s %5.0f ns", i+1, r.rate(), r.cpuPerRecord())
		for _, style := range styles {
			s, err := kinesubPass(ctx, local, stream, *records, 5*time.Second, style)
			if err != nil {
				return fmt.Errorf("kinesistest kinesub %s pass %d: %w", style, i+1, err)
			}
			rateRatios[style] = append(rateRatios[style], s.rate()/r.rate())
			cpuRatios[style] = append(cpuRatios[style], s.cpuPerRecord()/r.cpuPerRecord())
			line += fmt.Sprintf(" | %s %8.0f/s %5.0f ns", style, s.rate(), s.cpuPerRecord())
		}
		fmt.Println(line + " (records/s, ns CPU/record)")
	}
	fmt.Printf("on kinesistest, %d rounds, medians (CPU includes the server's, the same for each pass):\n", *pairs)
	goals := map[string]float64{"messages": 1.10, "all": 1.10, "batches": 1.05}
	for _, style := range styles {
		cr := median(cpuRatios[style])
		fmt.Printf("  %-9s ÷ raw: records/s %5.3f, CPU/record %5.3f (goal ≤ %.2f: %s)\n",
			style, median(rateRatios[style]), cr, goals[style], verdict(cr <= goals[style]))
	}
	return nil
}
