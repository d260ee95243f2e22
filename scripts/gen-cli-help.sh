#!/usr/bin/env bash
# Writes docs/src/cli-help.md: the `--help` output of dtxn and of each of its commands, so the
# book's option reference is the binary's own. Usage: scripts/gen-cli-help.sh DTXN [--check]
# (--check: do not write; exit 1 if the file differs from what DTXN prints).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:?usage: scripts/gen-cli-help.sh PATH/TO/dtxn [--check]}
out=docs/src/cli-help.md
gen() {
  echo "# Every option (generated)"
  echo
  echo "The \`--help\` output of \`dtxn\` and of each command, written by"
  echo "\`scripts/gen-cli-help.sh target/release/dtxn\` (do not edit by hand; CI checks that it"
  echo "matches the binary). What the commands do: [CLI reference](cli.md)."
  echo
  echo "## \`dtxn\`"
  echo
  echo '```text'
  "$bin" --help
  echo '```'
  for cmd in $("$bin" --help | awk '/^Commands:/ {f = 1; next} /^$/ {f = 0} f {print $1}'); do
    [ "$cmd" = help ] && continue
    echo
    echo "## \`dtxn $cmd\`"
    echo
    echo '```text'
    "$bin" "$cmd" --help
    echo '```'
  done
}
if [ "${2:-}" = --check ]; then
  if ! diff -u "$out" <(gen); then
    echo "$out is stale: run scripts/gen-cli-help.sh target/release/dtxn" >&2
    exit 1
  fi
else
  gen > "$out"
fi
