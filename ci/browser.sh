#!/usr/bin/env bash
# Makes sure headless Chromium and its WebDriver are on the machine for the console's browser
# test (admin/tests/console.rs), installs Debian's `chromium` and `chromium-driver` when they are
# missing, and exports where they are. Source it: `. ci/browser.sh` (`.ci/run` does). It sets
# TASKGATE_REQUIRE_BROWSER=1, so the test fails, rather than skips, if the install did not work.
# On a GitHub runner the preinstalled Chrome and its driver ($CHROMEWEBDRIVER) are used.

browser_log() { printf '[browser] %s\n' "$*" >&2; }

find_browser() {
  TASKGATE_CHROME=${TASKGATE_CHROME:-$(command -v chromium || command -v chromium-browser \
    || command -v google-chrome || command -v google-chrome-stable || true)}
  TASKGATE_CHROMEDRIVER=${TASKGATE_CHROMEDRIVER:-$(command -v chromedriver || true)}
  if [ -z "$TASKGATE_CHROMEDRIVER" ] && [ -n "${CHROMEWEBDRIVER:-}" ] \
    && [ -x "$CHROMEWEBDRIVER/chromedriver" ]; then
    TASKGATE_CHROMEDRIVER="$CHROMEWEBDRIVER/chromedriver"
  fi
  if [ -z "$TASKGATE_CHROMEDRIVER" ] && [ -x /usr/lib/chromium/chromedriver ]; then
    TASKGATE_CHROMEDRIVER=/usr/lib/chromium/chromedriver
  fi
  [ -n "$TASKGATE_CHROME" ] && [ -n "$TASKGATE_CHROMEDRIVER" ]
}

install_browser() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      browser_log "not root and no sudo: cannot install chromium"; return 1
    fi
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    browser_log "no apt-get: install Chromium and chromedriver yourself"; return 1
  fi
  browser_log "installing chromium and chromium-driver (Debian packages)"
  $sudo apt-get update -qq >&2 || browser_log "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium chromium-driver >&2
}

if ! find_browser; then
  install_browser || browser_log "the install failed"
  unset TASKGATE_CHROME TASKGATE_CHROMEDRIVER
  find_browser || browser_log "still no Chromium/chromedriver: the console test will fail"
fi
export TASKGATE_CHROME TASKGATE_CHROMEDRIVER
export TASKGATE_REQUIRE_BROWSER=1
browser_log "TASKGATE_CHROME=$TASKGATE_CHROME TASKGATE_CHROMEDRIVER=$TASKGATE_CHROMEDRIVER"
