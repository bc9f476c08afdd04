package faultproxy

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	getRecords   = kinesisPrefix + "GetRecords"
	putRecord    = kinesisPrefix + "PutRecord"
	updateItem   = dynamoDBPrefix + "UpdateItem"
	getItem      = dynamoDBPrefix + "GetItem"
	noSuchTarget = "Other_20200101.Op"
)

var allKinds = []Fault{
	{Throttle, 1}, {InternalFailure, 1}, {ExpiredIterator, 1},
	{ConditionalCheckFailed, 1}, {DropConnection, 1}, {Latency, 1},
}

type call struct {
	op          string
	conditional bool
}

// mixedCalls cycles through operations to which different subsets of allKinds apply.
func mixedCalls(n int) []call {
	pattern := []call{{getRecords, false}, {putRecord, false}, {updateItem, true}, {updateItem, false}, {getItem, false}}
	out := make([]call, n)
	for i := range out {
		out[i] = pattern[i%len(pattern)]
	}
	return out
}

// decisions records what d decides for each call: the kind's name, or "-" for none.
func decisions(d *decider, calls []call) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		if k, ok := d.decide(c.op, c.conditional); ok {
			out[i] = k.String()
		} else {
			out[i] = "-"
		}
	}
	return out
}

func TestDecideSameSeedSameSequence(t *testing.T) {
	calls := mixedCalls(500)
	plan := Plan{Seed: 42, Rate: 0.5, Faults: allKinds, Latency: time.Millisecond}
	a := decisions(newDecider(plan), calls)
	b := decisions(newDecider(plan), calls)
	if strings.Join(a, ",") != strings.Join(b, ",") {
		t.Fatalf("same seed gave different decisions:\n%v\n%v", a, b)
	}
	plan.Seed = 43
	c := decisions(newDecider(plan), calls)
	if strings.Join(a, ",") == strings.Join(c, ",") {
		t.Fatalf("seeds 42 and 43 gave the same 500 decisions")
	}
}

// Requests that are not eligible must not consume draws, so adding unrelated traffic does not
// change the faults that eligible requests see.
func TestDecideIneligibleRequestsDoNotShiftSequence(t *testing.T) {
	plan := Plan{Seed: 7, Rate: 0.5, Faults: []Fault{{Throttle, 1}, {ExpiredIterator, 1}}, Ops: []string{getRecords}}
	plain := make([]call, 200)
	for i := range plain {
		plain[i] = call{getRecords, false}
	}
	var interleaved []call
	for _, c := range plain {
		interleaved = append(interleaved, call{putRecord, false}, c, call{noSuchTarget, false})
	}
	want := decisions(newDecider(plan), plain)
	got := decisions(newDecider(plan), interleaved)
	for i := range want {
		if got[3*i] != "-" || got[3*i+2] != "-" {
			t.Fatalf("ineligible request faulted at %d: %v %v", i, got[3*i], got[3*i+2])
		}
		if got[3*i+1] != want[i] {
			t.Fatalf("decision %d = %s with unrelated traffic, %s without", i, got[3*i+1], want[i])
		}
	}
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plan  Plan
		calls []call
		// allowed kinds for every call; "-" means no fault. Every allowed outcome must occur.
		want []string
	}{
		{
			name:  "rate 0 never faults",
			plan:  Plan{Rate: 0, Faults: allKinds, Latency: time.Millisecond},
			calls: mixedCalls(100),
			want:  []string{"-"},
		},
		{
			name:  "rate 1 always faults when a kind applies",
			plan:  Plan{Rate: 1, Faults: []Fault{{Throttle, 1}}},
			calls: mixedCalls(100),
			want:  []string{"Throttle"},
		},
		{
			name:  "ops filter",
			plan:  Plan{Rate: 1, Faults: []Fault{{Throttle, 1}}, Ops: []string{updateItem}},
			calls: []call{{getRecords, false}, {getItem, false}, {putRecord, false}},
			want:  []string{"-"},
		},
		{
			name:  "unknown services are never faulted",
			plan:  Plan{Rate: 1, Faults: allKinds, Latency: time.Millisecond},
			calls: []call{{noSuchTarget, false}, {"", false}, {"DynamoDBStreams_20120810.GetRecords", false}},
			want:  []string{"-"},
		},
		{
			name:  "expired iterator only on GetRecords",
			plan:  Plan{Rate: 1, Faults: []Fault{{ExpiredIterator, 1}}},
			calls: []call{{putRecord, false}, {kinesisPrefix + "GetShardIterator", false}, {getItem, false}},
			want:  []string{"-"},
		},
		{
			name:  "expired iterator on GetRecords",
			plan:  Plan{Rate: 1, Faults: []Fault{{ExpiredIterator, 1}}},
			calls: []call{{getRecords, false}},
			want:  []string{"ExpiredIterator"},
		},
		{
			name:  "conditional check failed only on conditional writes",
			plan:  Plan{Rate: 1, Faults: []Fault{{ConditionalCheckFailed, 1}}},
			calls: []call{{updateItem, false}, {getItem, true}, {dynamoDBPrefix + "TransactWriteItems", true}, {getRecords, true}},
			want:  []string{"-"},
		},
		{
			name:  "conditional check failed on conditional writes",
			plan:  Plan{Rate: 1, Faults: []Fault{{ConditionalCheckFailed, 1}}},
			calls: []call{{updateItem, true}, {dynamoDBPrefix + "PutItem", true}, {dynamoDBPrefix + "DeleteItem", true}},
			want:  []string{"ConditionalCheckFailed"},
		},
		{
			name:  "zero weight is never chosen",
			plan:  Plan{Rate: 1, Faults: []Fault{{Throttle, 0}, {InternalFailure, 3}}},
			calls: mixedCalls(100),
			want:  []string{"InternalFailure"},
		},
		{
			name:  "weighted choice among applicable kinds",
			plan:  Plan{Rate: 1, Faults: []Fault{{Throttle, 1}, {ExpiredIterator, 1}}},
			calls: slices.Repeat([]call{call{getRecords, false}}, 100),
			want:  []string{"Throttle", "ExpiredIterator"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[string]int{}
			for i, got := range decisions(newDecider(tc.plan), tc.calls) {
				if !slices.Contains(tc.want, got) {
					t.Errorf("call %d (%+v): got %s, want one of %v", i, tc.calls[i], got, tc.want)
				}
				seen[got]++
			}
			for _, w := range tc.want {
				if seen[w] == 0 {
					t.Errorf("%s never chosen in %d calls: %v", w, len(tc.calls), seen)
				}
			}
		})
	}
}

func TestDecideRateAndWeights(t *testing.T) {
	const n = 20000
	d := newDecider(Plan{Seed: 1, Rate: 0.25, Faults: []Fault{{Throttle, 3}, {InternalFailure, 1}}})
	seen := map[string]int{}
	for _, got := range decisions(d, slices.Repeat([]call{call{getRecords, false}}, n)) {
		seen[got]++
	}
	near := func(name string, got int, want float64) {
		t.Helper()
		if math.Abs(float64(got)/n-want) > 0.02 {
			t.Errorf("%s: %d of %d, want about %.3f", name, got, n, want)
		}
	}
	near("no fault", seen["-"], 0.75)
	near("Throttle", seen["Throttle"], 0.25*0.75)
	near("InternalFailure", seen["InternalFailure"], 0.25*0.25)
}

func TestDecideSetRate(t *testing.T) {
	d := newDecider(Plan{Rate: 1, Faults: []Fault{{Throttle, 1}}})
	if _, ok := d.decide(getRecords, false); !ok {
		t.Fatal("rate 1: no fault")
	}
	d.setRate(0)
	for range 100 {
		if k, ok := d.decide(getRecords, false); ok {
			t.Fatalf("rate 0 after setRate: got %v", k)
		}
	}
}

func TestPlanValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		plan Plan
		ok   bool
	}{
		{"empty", Plan{}, true},
		{"all kinds", Plan{Rate: 0.5, Faults: allKinds, Latency: time.Millisecond}, true},
		{"latency with zero weight needs no duration", Plan{Rate: 1, Faults: []Fault{{Throttle, 1}, {Latency, 0}}}, true},
		{"rate above 1", Plan{Rate: 1.5, Faults: []Fault{{Throttle, 1}}}, false},
		{"negative rate", Plan{Rate: -0.1, Faults: []Fault{{Throttle, 1}}}, false},
		{"NaN rate", Plan{Rate: math.NaN(), Faults: []Fault{{Throttle, 1}}}, false},
		{"rate without faults", Plan{Rate: 0.1}, false},
		{"rate with only zero weights", Plan{Rate: 0.1, Faults: []Fault{{Throttle, 0}}}, false},
		{"zero kind", Plan{Rate: 1, Faults: []Fault{{Weight: 1}}}, false},
		{"unknown kind", Plan{Rate: 1, Faults: []Fault{{Kind(99), 1}}}, false},
		{"negative weight", Plan{Rate: 1, Faults: []Fault{{Throttle, 2}, {InternalFailure, -1}}}, false},
		{"latency without duration", Plan{Rate: 1, Faults: []Fault{{Latency, 1}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.plan.validate()
			if (err == nil) != tc.ok {
				t.Fatalf("validate() = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "faultproxy: Plan.") {
				t.Errorf("error %q does not name the Plan field", err)
			}
		})
	}
}

func TestKindString(t *testing.T) {
	if got := ConditionalCheckFailed.String(); got != "ConditionalCheckFailed" {
		t.Errorf("ConditionalCheckFailed.String() = %q", got)
	}
	if got := Kind(0).String(); got != "Kind(0)" {
		t.Errorf("Kind(0).String() = %q", got)
	}
}
