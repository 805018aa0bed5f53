// The playground page in headless Chromium: it auto-runs a prompt given in the URL against a
// server with an API key and must show the streamed tokens coloured by source.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "e2e/server_fixture.h"

namespace dspark::serve {
namespace {

std::string Chromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"})
    if (std::filesystem::exists(p)) return p;
  return "";
}

std::string RunCommand(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) out.append(buf.data(), n);
  pclose(f);
  return out;
}

TEST(Playground, StreamsColouredTokensInHeadlessChromium) {
  const std::string chromium = Chromium();
  ASSERT_FALSE(chromium.empty()) << "chromium is not installed (scripts/install-deps.sh installs it)";
  TestServerConfig c;
  c.api_key = "sk-play";
  c.draft = DraftKind::kQ8Copy;
  c.parallel = 2;
  auto server = StartTestServer(c);
  const std::string profile = (std::filesystem::temp_directory_path() /
                               ("dspark_chromium_" + std::to_string(server->port))).string();
  const std::string url = "http://127.0.0.1:" + std::to_string(server->port) +
                          "/?autorun=1&max_tokens=48&key=sk-play&prompt=hello%20world";
  const std::string cmd = "timeout 90 " + chromium +
                          " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage"
                          " --disable-background-networking --disable-component-update --disable-sync"
                          " --no-first-run --user-data-dir=" + profile +
                          " --virtual-time-budget=20000 --dump-dom '" + url + "' 2>/dev/null";
  const std::string dom = RunCommand(cmd);
  std::filesystem::remove_all(profile);
  ASSERT_NE(dom.find("data-state=\"done\""), std::string::npos) << dom.substr(0, 4000);
  EXPECT_NE(dom.find("class=\"tok tok-draft\""), std::string::npos) << "no accepted-draft token shown";
  EXPECT_NE(dom.find("class=\"tok tok-target\""), std::string::npos) << "no target token shown";
  EXPECT_NE(dom.find("tok/s"), std::string::npos);
  EXPECT_NE(dom.find("tau"), std::string::npos);
}

}  // namespace
}  // namespace dspark::serve
