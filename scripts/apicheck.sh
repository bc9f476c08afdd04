#!/usr/bin/env bash
# Checks that the exported API of kinesub's library packages is compatible with the release
# recorded in api/RELEASE, or that CHANGELOG.md announces the break.
#
#   scripts/apicheck.sh            the check (make apicheck; make test runs it first)
#   scripts/apicheck.sh baseline   writes api/ from the commit in api/RELEASE (make api-baseline)
#
# The library packages are the module's packages except main packages and internal ones
# (examples/ and bench/ are modules of their own). Their API at the release is kept in api/ as
# export data written by apidiff (golang.org/x/exp/cmd/apidiff, pinned below): one file per
# package, api/<directory>.export, the root package's api/kinesub.export. api/BASELINE names the
# commit they were written from. So the check needs the files in the tree and no git history;
# only writing the baseline needs the release's commit.
#
# Each package is compared with its baseline. Compatible changes (additions, a new package)
# are printed. An incompatible change (anything removed or changed, a package gone) fails the
# check unless CHANGELOG.md announces it: its "## [Unreleased]" section (up to the next "## "
# heading) has a list entry under a "### Breaking" heading, or a list entry with the word
# BREAKING in it. At a release those entries move under the release's heading, the release's
# commit goes into api/RELEASE and `make api-baseline` writes its API, so the next
# incompatible change needs an entry of its own.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
GO=${GO:-go}
apidiff_version=v0.0.0-20261113113407-e3970619a1a4

die() { echo "apicheck: $*" >&2; exit 1; }

# release prints the commit recorded in api/RELEASE: its one line that is not a comment (#).
release() {
  [ -f api/RELEASE ] || die "api/RELEASE is missing: it names the commit of the last release"
  local c
  c=$(grep -v '^[[:space:]]*\(#\|$\)' api/RELEASE | tr -d '[:space:]' || true)
  [[ $c =~ ^[0-9a-f]{40}$ ]] || die "api/RELEASE must hold one full commit hash (and # comments), not '$c'"
  echo "$c"
}

# packages prints the import paths of the library packages of the module in the current
# directory.
packages() {
  "$GO" list -f '{{if ne .Name "main"}}{{.ImportPath}}{{end}}' ./... | grep -Ev '(^|/)internal(/|$)'
}

# exportfile prints the baseline file of package $1 of module $2.
exportfile() {
  local rel=${1#"$2"}
  rel=${rel#/}
  echo "api/${rel:-kinesub}.export"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
GOBIN="$tmp/bin" "$GO" install "golang.org/x/exp/cmd/apidiff@$apidiff_version" ||
  die "could not install apidiff $apidiff_version"
apidiff="$tmp/bin/apidiff"
module=$("$GO" list -m)

baseline() {
  local commit pkg file
  commit=$(release)
  git cat-file -e "$commit^{commit}" 2>/dev/null ||
    die "commit $commit (api/RELEASE) is not in this clone: fetch it, or the whole history"
  # A fixed directory, not a random one: export data records the source files' paths, so the
  # same commit gives the same files.
  src="${TMPDIR:-/tmp}/kinesub-api-$commit"
  rm -rf "$src" && mkdir -p "$src"
  trap 'rm -rf "$tmp" "$src"' EXIT
  git archive "$commit" | tar -x -C "$src"
  mkdir -p api
  find api -name '*.export' -delete
  for pkg in $(cd "$src" && packages); do
    file=$(exportfile "$pkg" "$module")
    mkdir -p "$(dirname "$file")"
    (cd "$src" && "$apidiff" -w "$root/$file" "$pkg")
    echo "$file: $pkg at $commit"
  done
  echo "$commit" >api/BASELINE
}

# announced reports whether CHANGELOG.md's [Unreleased] section announces a breaking change.
announced() {
  [ -f CHANGELOG.md ] || return 1
  awk '
    /^## /  { unreleased = ($0 ~ /^## \[Unreleased\]/); breaking = 0; next }
    !unreleased { next }
    /^### / { breaking = ($0 ~ /^### Breaking/); next }
    /^[[:space:]]*[-*] / { if (breaking || $0 ~ /BREAKING/) found = 1 }
    END { exit !found }' CHANGELOG.md
}

check() {
  local commit pkg file out incompatible=0
  commit=$(release)
  [ "$(cat api/BASELINE 2>/dev/null)" = "$commit" ] ||
    die "api/ holds the API of $(cat api/BASELINE 2>/dev/null || echo 'no commit'), api/RELEASE names $commit: run make api-baseline"
  local -A current=()
  for pkg in $(packages); do
    file=$(exportfile "$pkg" "$module")
    current[$file]=1
    if [ ! -f "$file" ]; then
      echo "$pkg: a new package (compatible)"
      continue
    fi
    out=$("$apidiff" "$file" "$pkg")
    if [ -n "$out" ]; then
      echo "$pkg:"
      sed 's/^/  /' <<<"$out"
    fi
    if grep -q '^Incompatible changes:' <<<"$out"; then
      incompatible=1
    fi
  done
  while IFS= read -r file; do
    if [ -z "${current[$file]:-}" ]; then
      echo "$file: its package is gone (incompatible)"
      incompatible=1
    fi
  done < <(find api -name '*.export' | sort)
  if [ "$incompatible" = 0 ]; then
    echo "apicheck: compatible with the release at ${commit:0:12}"
  elif announced; then
    echo "apicheck: incompatible with the release at ${commit:0:12}, announced in CHANGELOG.md"
  else
    echo "apicheck: incompatible with the release at ${commit:0:12}. If that is meant, announce" >&2
    echo "it in CHANGELOG.md under '## [Unreleased]', in a '### Breaking' section." >&2
    exit 1
  fi
}

case "${1:-check}" in
  check) check ;;
  baseline) baseline ;;
  *) die "usage: $0 [check|baseline]" ;;
esac
