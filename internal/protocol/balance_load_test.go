package protocol

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loadCase is a planCase with loads: owners' noted loads, this subscriber's shards' loads (by
// index) and the shards that moved lately.
type loadCase struct {
	planCase
	owners   map[string]float64
	mine     map[int]float64
	moved    []int
	orphans  []int // shards shown free because their owner stopped
	settling bool
	// want: the shards handed back, in order; take: how many leases PlanTake returns (drawn
	// from takeOf); steal: the owner stolen from, "" for none.
	want []int
}

func (c loadCase) input(t *testing.T) *BalanceIn {
	in := c.planCase.input(t)
	if c.owners == nil {
		return in
	}
	in.Load = &LoadIn{Owners: c.owners, Mine: map[string]float64{}, Moved: map[string]bool{}, Settling: c.settling}
	for i, l := range c.mine {
		in.Load.Mine[fmt.Sprintf("s%02d", i)] = l
	}
	for _, i := range c.moved {
		in.Load.Moved[fmt.Sprintf("s%02d", i)] = true
	}
	in.Orphans = map[string]bool{}
	for _, i := range c.orphans {
		in.Orphans[fmt.Sprintf("s%02d", i)] = true
	}
	return in
}

// TestPlanBalanceByLoad: tables of loads in, hand-backs, takes and steals out.
func TestPlanBalanceByLoad(t *testing.T) {
	ids := func(is ...int) []int { return is }
	cases := []loadCase{
		{planCase: planCase{name: "no loads: by count, the excess is handed back",
			table: "me me me me a -", beats: "me a", local: "RRRR..", was: "=", balance: true, take: 0, back: 1, backOf: "0 1 2 3"}},
		{planCase: planCase{name: "a load missing: by count",
			table: "me me me me a -", beats: "me a b", local: "RRRR..", was: "=", balance: true, take: 0, back: 2, backOf: "0 1 2 3"},
			owners: map[string]float64{"a": 5}, mine: map[int]float64{0: 10}},
		{planCase: planCase{name: "loads all zero: by count",
			table: "me me me me a -", beats: "me a", local: "RRRR..", was: "=", balance: true, take: 0, back: 1, backOf: "0 1 2 3"},
			owners: map[string]float64{"a": 0}, mine: map[int]float64{}},
		{planCase: planCase{name: "loads equal: by count",
			table: "me me me me a", beats: "me a", local: "RRRR.", was: "=", balance: true, back: 1, backOf: "0 1 2 3"},
			owners: map[string]float64{"a": 8}, mine: map[int]float64{0: 2, 1: 2, 2: 2, 3: 2}},
		{planCase: planCase{name: "by load: more shards than the count share, none handed back (within the slack)",
			table: "me me me me a", beats: "me a", local: "RRRR.", was: "=", balance: true},
			owners: map[string]float64{"a": 9}, mine: map[int]float64{0: 2, 1: 2, 2: 3, 3: 3}},
		{planCase: planCase{name: "by load: the hot owner hands back the shard closest to the mean",
			table: "me me me a a a", beats: "me a", local: "RRR...", was: "=", balance: true},
			owners: map[string]float64{"a": 6}, mine: map[int]float64{0: 10, 1: 4, 2: 2}, want: ids(1)},
		{planCase: planCase{name: "by load: never a shard that would make the other the hotter",
			table: "me a a a", beats: "me a", local: "R...", was: "=", balance: true},
			owners: map[string]float64{"a": 2}, mine: map[int]float64{0: 20}},
		{planCase: planCase{name: "by load: a shard that moved lately stays",
			table: "me me me a a a", beats: "me a", local: "RRR...", was: "=", balance: true},
			owners: map[string]float64{"a": 6}, mine: map[int]float64{0: 10, 1: 4, 2: 2}, moved: []int{1}, want: ids(2)},
		{planCase: planCase{name: "by load: several in one round, up to the mean",
			table: "me me me me me me a b", beats: "me a b", local: "RRRRRR..", was: "=", balance: true},
			owners: map[string]float64{"a": 0, "b": 0}, mine: map[int]float64{0: 3, 1: 3, 2: 3, 3: 3, 4: 3, 5: 3}, want: ids(0, 1, 2, 3)},
		{planCase: planCase{name: "by load: only on balance rounds",
			table: "me me me a a a", beats: "me a", local: "RRR...", was: "=", balance: false},
			owners: map[string]float64{"a": 6}, mine: map[int]float64{0: 10, 1: 4, 2: 2}},
		{planCase: planCase{name: "by load: shards being handed back do not count",
			table: "me me me a a a", beats: "me a", local: "LRR...", was: "=", balance: true},
			owners: map[string]float64{"a": 6}, mine: map[int]float64{0: 10, 1: 4, 2: 2}},
		{planCase: planCase{name: "by load: a count-poor owner does not steal from a live one",
			table: "me a a a a a", beats: "me a", local: "R.....", was: "=", balance: true},
			owners: map[string]float64{"a": 10}, mine: map[int]float64{0: 10}},
		{planCase: planCase{name: "by load: it does not steal from an owner whose heartbeat lapsed (its reap frees them)",
			table: "me a a a b", beats: "me a b~", local: "R....", was: "=", balance: true},
			owners: map[string]float64{"a": 20}, mine: map[int]float64{0: 10}},
		{planCase: planCase{name: "by load, take: above the mean, it takes nothing",
			table: "me me a - -", beats: "me a", local: "RR...", was: "="},
			owners: map[string]float64{"a": 2}, mine: map[int]float64{0: 5, 1: 5}},
		{planCase: planCase{name: "by load, take: the least loaded, one a round",
			table: "me a a - -", beats: "me a", local: "R....", was: "=", take: 1, takeOf: "3 4"},
			owners: map[string]float64{"a": 20}, mine: map[int]float64{0: 5}},
		{planCase: planCase{name: "by load, take: below the mean, not the least, not well below: nothing",
			table: "me a b - -", beats: "me a b", local: "R....", was: "="},
			owners: map[string]float64{"a": 14, "b": 9}, mine: map[int]float64{0: 10}},
		{planCase: planCase{name: "by load, take: well below the mean",
			table: "me a b - -", beats: "me a b", local: "R....", was: "=", take: 1, takeOf: "3 4"},
			owners: map[string]float64{"a": 20, "b": 8}, mine: map[int]float64{0: 10}},
		{planCase: planCase{name: "by load, take: never one it handed back lately",
			table: "me a a - -", beats: "me a", local: "R....", was: "=", take: 1, takeOf: "4"},
			owners: map[string]float64{"a": 20}, mine: map[int]float64{0: 5}, moved: []int{3}},
		{planCase: planCase{name: "by load, take: not while a shard it took is not measured yet",
			table: "me a a - -", beats: "me a", local: "R....", was: "="},
			owners: map[string]float64{"a": 20}, mine: map[int]float64{0: 5}, settling: true},
		{planCase: planCase{name: "by load, take: the shards of an owner that stopped, by count, even while settling",
			table: "me a a - - -", beats: "me a", local: "R.....", was: "=", take: 2, takeOf: "4 5"},
			owners: map[string]float64{"a": 20}, mine: map[int]float64{0: 5}, orphans: []int{4, 5}, settling: true},
		{planCase: planCase{name: "by load, take: the shards of an owner that stopped, up to the count share",
			table: "me a a - - - - -", beats: "me a", local: "R.......", was: "=", take: 3, takeOf: "3 4 5 6 7"},
			owners: map[string]float64{"a": 20}, mine: map[int]float64{0: 5}, orphans: []int{3, 4, 5, 6, 7}, settling: true},
		{planCase: planCase{name: "by load, take: the shard of an owner that stopped, even one it handed back lately",
			table: "me me a a -", beats: "me a", local: "RR...", was: "=", take: 1, takeOf: "4"},
			owners: map[string]float64{"a": 20}, mine: map[int]float64{0: 5, 1: 5}, orphans: []int{4}, moved: []int{4}},
		{planCase: planCase{name: "by load, take: at the count share, not the shards of an owner that stopped",
			table: "me me me a a -", beats: "me a", local: "RRR...", was: "="},
			owners: map[string]float64{"a": 2}, mine: map[int]float64{0: 5, 1: 5, 2: 5}, orphans: []int{5}},
		{planCase: planCase{name: "by load, take: the least loaded, by load and by count",
			table: "me a a - - -", beats: "me a", local: "R.....", was: "=", take: 2, takeOf: "3 4 5"},
			owners: map[string]float64{"a": 20}, mine: map[int]float64{0: 5}, orphans: []int{4, 5}},
		{planCase: planCase{name: "by load, take: more when many are free",
			table: "me a - - - - - - - -", beats: "me a", local: "R.........", was: "=", take: 4, takeOf: "2 3 4 5 6 7 8 9"},
			owners: map[string]float64{"a": 20}, mine: map[int]float64{0: 5}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for draw := range 50 {
				r := seqChooser(draw)
				in := c.input(t)
				requireDrawn(t, "take", PlanTake(in, r), c.take, c.takeOf)
				in = c.input(t)
				wasLive := map[string]bool{}
				owners, _ := in.counts()
				for o := range owners {
					wasLive[o] = true
				}
				p := PlanBalance(in, wasLive, c.balance, r)
				if c.owners != nil && c.backOf == "" {
					var want []string
					for _, i := range c.want {
						want = append(want, fmt.Sprintf("s%02d", i))
					}
					assert.Equal(t, want, p.HandBack, "hand-backs")
				} else {
					requireDrawn(t, "hand-back", p.HandBack, c.back, c.backOf)
				}
				require.Equal(t, c.victim, p.Victim, "victim")
			}
		})
	}
}

// seqChooser draws deterministically from a seed.
type seqChooser int

func (s seqChooser) IntN(n int) int { return int(s) % n }
