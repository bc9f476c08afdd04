#!/usr/bin/env bash
# mutants-core.sh: the mutation check of the lease protocol's core (make mutants-core). Each
# patch in internal/protocol/protosim/testdata/mutants/ breaks protocol.Machine in one way; for
# each, this copies the module's go.mod and internal/protocol to a scratch directory, applies
# the patch there (the tree itself is never changed), and runs TestCoreMutant on the copy: the
# simulator's 100 seeds once each, then TestExploreMachine's searches until one breaks a
# promise. It prints how each mutation was caught, and fails if one was not (fewer than 2
# seeds and no search), or if a patch no longer applies. A patch's first line says what it
# breaks. survivors/ holds mutations the checks do not catch yet (docs/leases.md, "Mutations of
# the core"): run one by name to see.
#
# Usage: scripts/mutants-core.sh [name ...]   (default: every patch but survivors/; a name is
# a patch's path under testdata/mutants without .patch, e.g. survivors/early-thief)
set -euo pipefail
GO=${GO:-go}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/internal/protocol/protosim/testdata/mutants
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
	for p in "$dir"/*.patch; do
		n=$(basename "$p" .patch)
		names+=("$n")
	done
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
survived=()
for n in "${names[@]}"; do
	copy=$scratch/$n
	mkdir -p "$copy/internal"
	cp "$root/go.mod" "$root/go.sum" "$copy/"
	cp -R "$root/internal/protocol" "$copy/internal/"
	if ! (cd "$copy" && git apply "$dir/$n.patch"); then
		echo "mutant $n: the patch does not apply"
		survived+=("$n")
		continue
	fi
	out=$(cd "$copy" && GOGC=400 $GO test -count=1 -timeout 20m -run 'TestCoreMutant$' -v ./internal/protocol/protosim -protosim.mutant="$n" 2>&1) && rc=0 || rc=$?
	grep "^mutant $n: " <<<"$out" || echo "$out" | tail -20
	if [ $rc -ne 0 ]; then
		survived+=("$n")
	fi
	rm -rf "$copy"
done
if [ ${#survived[@]} -gt 0 ]; then
	echo "mutants-core: ${#survived[@]} of ${#names[@]} not caught: ${survived[*]}"
	exit 1
fi
echo "mutants-core: all ${#names[@]} mutations of protocol.Machine caught"
