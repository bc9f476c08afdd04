#!/usr/bin/env bash
# mutants.sh plants bugs in the lease protocol, one at a time, and checks that the fleet
# simulation (TestSimulation) catches each: `make mutants`.
#
# Each mutation is a patch in testdata/mutants/<name>.patch (its first lines, starting with '#',
# say what it changes); where the code it mutates moved to internal/protocol, the patch of the
# same name in testdata/mutants/core/ is applied instead. The script copies the tree to a
# temporary directory (the checkout is never changed, even when the script is stopped), and for
# each patch applies it there, builds the root package's test binary, takes the patch back out,
# and runs the binary's TestSimulation over MUTANT_SEEDS seeds from MUTANT_FIRST, without the
# regression seeds, in chunks of MUTANT_CHUNK. A mutation is caught when at least 2% of the
# seeds run break a promise; with MUTANT_EARLY=1 (the default) it stops once enough seeds broke
# to pass that bar over all MUTANT_SEEDS. It fails when a mutation is not caught, when a patch
# no longer applies, or when a mutated tree does not build.
#
#   MUTANTS='thief-at-once reap-early'  only these (default: every patch in testdata/mutants;
#                                     uncaught/NAME runs one of those the simulation misses)
#   MUTANT_SEEDS=250 MUTANT_FIRST=1   the seeds each mutation runs
#   MUTANT_CHUNK=50                   seeds per test run (the early stop looks between runs)
#   MUTANT_EARLY=0                    run every seed, to measure the rate
#   MUTANT_BASELINE=1                 run the unmutated tree over the same seeds first (none
#                                     may break)
set -uo pipefail

GO=${GO:-go}
seeds=${MUTANT_SEEDS:-250}
first=${MUTANT_FIRST:-1}
chunk=${MUTANT_CHUNK:-50}
early=${MUTANT_EARLY:-1}
baseline=${MUTANT_BASELINE:-0}
dir=testdata/mutants
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1

if [ -n "${MUTANTS:-}" ]; then
	read -r -a names <<<"$MUTANTS"
else
	names=()
	for p in "$dir"/*.patch; do
		n=$(basename "$p")
		names+=("${n%.patch}")
	done
fi
need=$(((seeds * 2 + 99) / 100)) # broken seeds that pass the 2% bar over every seed
[ "$need" -ge 1 ] || need=1

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kinesub-mutants.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT # Ctrl-C: the EXIT trap still removes the copy
trap 'exit 143' TERM
tree=$tmp/tree
mkdir -p "$tree"
# The library's files as they are in the checkout (committed or not); not the other modules.
git ls-files -z --cached --others --exclude-standard |
	grep -zv -e '^examples/' -e '^bench/' |
	while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
	tar --null -T - -cf - | tar -xf - -C "$tree" || exit 1
# Only the simulation's test files are built: the root package's others would more than double
# each mutation's compile. Should the simulation come to need another, all of them are built.
keep=" ${MUTANT_TESTFILES:-sim_test.go helpers_test.go} "
for f in "$tree"/*_test.go; do
	case $keep in *" $(basename "$f") "*) ;; *) mv "$f" "$f.off" ;; esac
done
if ! (cd "$tree" && $GO test -c -o "$tmp/none.test" . >"$tmp/build.err" 2>&1); then
	for f in "$tree"/*_test.go.off; do mv "$f" "${f%.off}"; done
	(cd "$tree" && $GO test -c -o "$tmp/none.test" .) || { echo "mutants: the unmutated tree does not build"; exit 1; }
	echo "mutants: the simulation needs test files beyond '$keep': building them all (MUTANT_TESTFILES)"
fi

# run NAME BINARY: runs BINARY's simulation over the seeds; prints a line of figures and sets
# verdict (caught, missed, clean, dirty).
run() {
	local name=$1 bin=$2 broken=0 ran=0 crashes=0 f n out p b list=() tag=${1//\//_}
	local start=$SECONDS stopped=""
	for ((f = first; f < first + seeds; f += chunk)); do
		n=$((first + seeds - f < chunk ? first + seeds - f : chunk))
		out=$tmp/$tag.$f.out
		(cd "$tree" && GOGC=400 "$bin" -test.run '^TestSimulation$' -test.v -test.timeout 10m \
			-sim.regressions=false -sim.first="$f" -sim.seeds="$n" >"$out" 2>&1)
		p=$(grep -cE -e '--- PASS: TestSimulation/seed=' "$out")
		b=$(grep -oE -e '--- FAIL: TestSimulation/seed=[0-9]+' "$out" | sed 's/.*seed=//' | sort -un)
		ran=$((ran + p))
		for s in $b; do broken=$((broken + 1)) ran=$((ran + 1)) list+=("$s"); done
		if ! grep -qE '^(PASS|FAIL)$' "$out" && grep -qE '^(panic|fatal error):' "$out"; then
			# The binary died (a panic, a deadlocked bubble, the timeout): that is a broken
			# seed too; the chunk's seeds that did not finish count as not run.
			crashes=$((crashes + 1))
			[ -n "$b" ] || { broken=$((broken + 1)) ran=$((ran + 1)) list+=("crash@$f"); }
			grep -m1 -E '^(panic|fatal error):' "$out" | sed "s/^/    $name: /"
		fi
		if [ "$early" = 1 ] && [ "$broken" -ge "$need" ] && [ "$name" != "(none)" ]; then
			[ $((f + n)) -lt $((first + seeds)) ] && stopped=", stopped early"
			break
		fi
	done
	local pct=0
	[ "$ran" -gt 0 ] && pct=$(awk -v b="$broken" -v r="$ran" 'BEGIN { printf "%.1f", 100 * b / r }')
	if [ "$name" = "(none)" ]; then
		if [ "$broken" -eq 0 ]; then verdict=clean; else verdict=dirty; fi
	elif [ "$ran" -gt 0 ] && [ $((broken * 100)) -ge $((ran * 2)) ]; then
		verdict=caught
	else
		verdict=missed
	fi
	local shown=${list[*]:0:8}
	printf '%-32s %5d of %5d seeds broke a promise (%5s%%)  %-7s %4ds%s%s\n' "$name" "$broken" "$ran" "$pct" "$verdict" \
		$((SECONDS - start)) "$stopped" "${shown:+; seeds: $shown}"
	summary+=("$(printf '%-32s %5d / %5d  %s' "$name" "$broken" "$ran" "$verdict")")
}

echo "mutants: ${#names[@]} mutations × $seeds seeds from $first (caught: 2% of the seeds run, $need of $seeds)"
summary=()
bad=()
if [ "$baseline" = 1 ]; then
	run "(none)" "$tmp/none.test"
	[ "$verdict" = clean ] || bad+=("(none): the unmutated tree broke a promise")
fi
for name in "${names[@]}"; do
	patch=$root/$dir/$name.patch
	if [ ! -f "$patch" ]; then
		echo "mutants: $name: no such patch ($dir/$name.patch)"
		bad+=("$name: no patch")
		continue
	fi
	if ! (cd "$tree" && git apply --check "$patch" 2>"$tmp/apply.err"); then
		# The same bug for the layout with the protocol's decisions in internal/protocol.
		alt=$root/$dir/core/$name.patch
		if [ -f "$alt" ] && (cd "$tree" && git apply --check "$alt" 2>/dev/null); then
			patch=$alt
		fi
	fi
	if ! (cd "$tree" && git apply --check "$patch" 2>"$tmp/apply.err"); then
		echo "mutants: $name: $dir/$name.patch no longer applies; the code it mutates moved:"
		sed 's/^/    /' "$tmp/apply.err"
		bad+=("$name: patch no longer applies")
		summary+=("$(printf '%-32s %s' "$name" "PATCH DOES NOT APPLY")")
		continue
	fi
	(cd "$tree" && git apply "$patch")
	built=1 tag=${name//\//_}
	(cd "$tree" && $GO test -c -o "$tmp/$tag.test" . >"$tmp/build.err" 2>&1) || built=0
	(cd "$tree" && git apply -R "$patch") || { echo "mutants: $name: could not take the patch back out"; exit 1; }
	if [ "$built" = 0 ]; then
		echo "mutants: $name: the mutated tree does not build:"
		sed 's/^/    /' "$tmp/build.err"
		bad+=("$name: does not build")
		summary+=("$(printf '%-32s %s' "$name" "DOES NOT BUILD")")
		continue
	fi
	run "$name" "$tmp/$tag.test"
	rm -f "$tmp/$tag.test" "$tmp/$tag".*.out
	[ "$verdict" = caught ] || bad+=("$name: not caught")
done

echo
echo "mutation                         broken / run   verdict"
printf '%s\n' "${summary[@]}"
if [ "${#bad[@]}" -gt 0 ]; then
	echo
	printf 'mutants: %s\n' "${bad[@]}"
	echo "mutants: replay a seed: git apply $dir/<name>.patch in a copy of the tree, then"
	echo "  go test -run TestSimulation -sim.seed=<seed> -sim.log -v ."
	exit 1
fi
