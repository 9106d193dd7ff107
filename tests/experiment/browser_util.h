#pragma once

// Shared by the browser tests: load a page in Debian's headless Chromium and
// read the report's self-check from the DOM it leaves.
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "shell_util.h"

namespace strata::testing_util {

// The Chromium executable, or "" when none is installed.
inline std::string Chromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    int st = 0;
    std::string path =
        RunShell(std::string("command -v ") + name + " 2>/dev/null", &st);
    while (!path.empty() && (path.back() == '\n' || path.back() == ' '))
      path.pop_back();
    if (st == 0 && !path.empty()) return path;
  }
  return "";
}

struct BrowserLoad {
  std::string url;         // file:///... or http://...
  std::string screenshot;  // PNG to write too; "" = none
  int virtual_time_ms = 10000;
};

// The DOM after the page ran for the virtual time, or "" with *why set.
// At most two Chromium starts of at most 120 s each.
inline std::string LoadPage(const BrowserLoad& load, std::string* why) {
  const std::string chromium = Chromium();
  if (chromium.empty()) {
    *why =
        "chromium is not installed (scripts/setup.sh installs Debian's "
        "chromium)";
    return "";
  }
  // Each run gets a profile directory of its own: instances sharing the
  // default one (tests run in parallel) hand the page to the first instance
  // and exit without a DOM. One retry before concluding it cannot start.
  int st = 0;
  std::string dom;
  for (int attempt = 0; attempt < 2; ++attempt) {
    char profile[] = "/tmp/strata_chromium_XXXXXX";
    if (::mkdtemp(profile) == nullptr) {
      *why = "cannot create a Chromium profile directory in /tmp";
      return "";
    }
    dom = RunShell("timeout 120 " + chromium +
                       " --headless --no-sandbox --disable-gpu "
                       "--disable-dev-shm-usage --window-size=1280,1600 "
                       "--user-data-dir=" +
                       profile + " --virtual-time-budget=" +
                       std::to_string(load.virtual_time_ms) +
                       (load.screenshot.empty()
                            ? ""
                            : " --screenshot='" + load.screenshot + "'") +
                       " --dump-dom '" + load.url + "' 2>/dev/null",
                   &st);
    int rm_status = 0;
    RunShell(std::string("rm -rf '") + profile + "'", &rm_status);
    if (st == 0 && dom.find("<html") != std::string::npos) return dom;
  }
  *why = "chromium could not load the page (exit status " + std::to_string(st) +
         ", twice); it may not be able to start here";
  return "";
}

// The DOM of the HTML file `html` after its scripts ran, or "" with *why.
inline std::string DumpDom(const std::string& html, std::string* why) {
  return LoadPage({"file://" + html, "", 10000}, why);
}

// The self-check JSON the page wrote into <pre id="strata-report-check">,
// or a discarded value when there is none.
inline nlohmann::json SelfCheck(const std::string& dom) {
  const std::string open = "id=\"strata-report-check\"";
  size_t at = dom.find(open);
  if (at == std::string::npos) return nullptr;
  size_t start = dom.find('>', at);
  size_t end = dom.find("</pre>", start);
  if (start == std::string::npos || end == std::string::npos) return nullptr;
  std::string text = dom.substr(start + 1, end - start - 1);
  // --dump-dom escapes &, < and > in text.
  for (const auto& [from, to] :
       {std::pair<std::string, std::string>{"&quot;", "\""},
        {"&lt;", "<"},
        {"&gt;", ">"},
        {"&amp;", "&"}}) {
    for (size_t p = text.find(from); p != std::string::npos;
         p = text.find(from, p + 1))
      text.replace(p, from.size(), to);
  }
  return nlohmann::json::parse(text, nullptr, false);
}

// The number of points the self-check counted in chart `id`; -1 when the
// page has no such chart.
inline int ChartPoints(const nlohmann::json& check, const std::string& id) {
  if (!check.is_object() || !check.contains("results")) return -1;
  for (const auto& r : check["results"])
    if (r.value("id", "") == id) return r.value("points", 0);
  return -1;
}

}  // namespace strata::testing_util
