#!/usr/bin/env bash
# pipelines/container-build.sh PREFIX: the build stage of pipelines/Dockerfile. Builds zshard (release, with
# Cargo.lock as it is) and installs what the runtime image holds under PREFIX:
#   bin/zshard (stripped), share/man/man1/zshard.1 and zshard-COMMAND.1, share/bash-completion/completions/zshard,
#   share/zsh/site-functions/_zshard, share/fish/vendor_completions.d/zshard.fish.
# CI runs it outside a container (tests/container-build.sh) and checks the result.
set -euo pipefail
prefix=${1:?usage: pipelines/container-build.sh PREFIX}
cd "$(dirname "$0")/.."
cargo build --release --locked -p zshard
bin="${CARGO_TARGET_DIR:-target}/release/zshard"
install -D -m 755 -s "$bin" "$prefix/bin/zshard"
zshard="$prefix/bin/zshard"
mkdir -p "$prefix/share/man/man1" "$prefix/share/bash-completion/completions" \
  "$prefix/share/zsh/site-functions" "$prefix/share/fish/vendor_completions.d"
"$zshard" man >"$prefix/share/man/man1/zshard.1"
for command in convert plan finalize verify run ls status demo completions man; do
  "$zshard" man "$command" >"$prefix/share/man/man1/zshard-$command.1"
done
"$zshard" completions bash >"$prefix/share/bash-completion/completions/zshard"
"$zshard" completions zsh >"$prefix/share/zsh/site-functions/_zshard"
"$zshard" completions fish >"$prefix/share/fish/vendor_completions.d/zshard.fish"
echo "installed zshard into $prefix: $("$zshard" -V)"
