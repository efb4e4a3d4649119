#!/usr/bin/env bash
# deps.sh — install what building and testing snug needs on Debian 12, only what is missing.
# Debian packages: compilers, CMake/Ninja, PCRE2 (pre-tokenizer regex), utf8proc (NFC),
# jansson (JSON at the edges), libmicrohttpd (HTTP server), libcurl (HTTP client), libpng /
# libjpeg-turbo / libwebp (image decoding for the vision tower), chromium + chromium-driver (tests
# only: the chat page's headless browser test). Python packages (tests only): numpy, tokenizers,
# gguf, jinja2, openai, pytest, pillow (the image-preprocessing reference), anthropic and
# openai-agents and litellm (the agent-client SDKs the server's API and client-setup tests
# drive), jsonschema + pydantic + instructor + langchain-openai (structured outputs; jsonschema
# with its format checkers' packages, so generated documents are held to their formats),
# selenium (drives chromium).
set -euo pipefail
pkgs=(cmake ninja-build gcc clang clang-format libclang-rt-14-dev pkg-config libpcre2-dev
      libutf8proc-dev libjansson-dev libmicrohttpd-dev libcurl4-openssl-dev python3
      libpng-dev libjpeg62-turbo-dev libwebp-dev)
# with --python (the test suite, scripts/test.sh) also the browser of the chat-page test
[ "${1:-}" = "--python" ] && pkgs+=(chromium chromium-driver)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >&2
fi
if [ "${1:-}" = "--python" ]; then
  python3 - <<'PY' 2>/dev/null || python3 -m pip install -q numpy tokenizers gguf jinja2 openai pytest \
    pillow anthropic openai-agents litellm "jsonschema[format-nongpl]" pydantic instructor \
    langchain-openai selenium lark >&2
import numpy, tokenizers, gguf, jinja2, openai, pytest, PIL, anthropic, agents, litellm, jsonschema, pydantic, instructor, langchain_openai, selenium, lark, fqdn, rfc3986_validator, rfc3339_validator, isoduration
PY
fi
