// The playground page in headless Chromium: it auto-runs a prompt given in the URL against a
// server with an API key and must show the streamed tokens coloured by source. The test drives
// Chromium over the DevTools protocol on a pipe (--remote-debugging-pipe: NUL-separated JSON on
// fds 3 and 4), polling the page in real time until the stream is done.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "e2e/server_fixture.h"
#include "util/testing/temp_dir.h"

namespace dspark::serve {
namespace {

using json = nlohmann::json;

std::string Chromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"})
    if (std::filesystem::exists(p)) return p;
  return "";
}

// A headless Chromium child speaking the DevTools protocol over a pipe.
class DevTools {
 public:
  DevTools(const std::string& chromium, const std::string& profile, const std::string& url) {
    // Everything the child needs is built before fork (the test process is multi-threaded).
    std::vector<std::string> args = {chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                     "--disable-background-networking", "--disable-component-update", "--disable-sync",
                                     "--no-first-run", "--remote-debugging-pipe", "--user-data-dir=" + profile, url};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      // The protocol wants its input on fd 3 and its output on fd 4.
      const int in = dup(to_child[0]), out = dup(from_child[1]);
      dup2(in, 3);
      dup2(out, 4);
      const int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, 1);
      dup2(devnull, 2);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    to_ = to_child[1];
    from_ = from_child[0];
  }
  ~DevTools() {
    if (pid_ > 0) {
      Call("Browser.close", json::object());
      for (int i = 0; i < 50 && waitpid(pid_, nullptr, WNOHANG) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (waitpid(pid_, nullptr, WNOHANG) == 0) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
      }
    }
    if (to_ >= 0) close(to_);
    if (from_ >= 0) close(from_);
  }

  // Sends a command and returns its "result" (null on error or after 10 s).
  json Call(const std::string& method, const json& params, const std::string& session = "") {
    const int id = next_id_++;
    json msg = {{"id", id}, {"method", method}, {"params", params}};
    if (!session.empty()) msg["sessionId"] = session;
    const std::string data = msg.dump() + '\0';
    if (write(to_, data.data(), data.size()) != static_cast<ssize_t>(data.size())) return nullptr;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      size_t nul;
      while ((nul = buf_.find('\0')) != std::string::npos) {
        const json reply = json::parse(buf_.substr(0, nul), nullptr, false);
        buf_.erase(0, nul + 1);
        if (reply.is_object() && reply.value("id", -1) == id) return reply.contains("result") ? reply["result"] : json();
      }
      pollfd p{from_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char chunk[65536];
      const ssize_t n = read(from_, chunk, sizeof(chunk));
      if (n <= 0) return nullptr;
      buf_.append(chunk, static_cast<size_t>(n));
    }
    return nullptr;
  }

  bool ok() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  int next_id_ = 1;
  std::string buf_;
};

TEST(Playground, StreamsColouredTokensInHeadlessChromium) {
  const std::string chromium = Chromium();
  ASSERT_FALSE(chromium.empty()) << "chromium is not installed (scripts/install-deps.sh installs it)";
  TestServerConfig c;
  c.api_key = "sk-play";
  c.draft = DraftKind::kQ8Copy;
  c.parallel = 2;
  auto server = StartTestServer(c);
  // Removed below, and with the process's temp directory if the test stops earlier.
  const std::string profile = dspark::testing::TempPath("chromium_profile");
  const std::string url = "http://127.0.0.1:" + std::to_string(server->port) +
                          "/?autorun=1&max_tokens=48&key=sk-play&prompt=hello%20world";
  json page;
  {
    DevTools dt(chromium, profile, url);
    ASSERT_TRUE(dt.ok());
    std::string session;
    for (int i = 0; i < 100 && session.empty(); ++i) {
      const json targets = dt.Call("Target.getTargets", json::object());
      if (targets.is_object())
        for (const json& t : targets["targetInfos"])
          if (t["type"] == "page" && t["url"].get<std::string>().find("autorun") != std::string::npos) {
            const json a = dt.Call("Target.attachToTarget", {{"targetId", t["targetId"]}, {"flatten", true}});
            if (a.is_object()) session = a.value("sessionId", "");
          }
      if (session.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_FALSE(session.empty()) << "no page target";
    const std::string probe =
        "JSON.stringify({state: document.body ? (document.body.dataset.state || '') : '',"
        " draft: document.querySelectorAll('#out .tok.tok-draft').length,"
        " target: document.querySelectorAll('#out .tok.tok-target').length,"
        " stats: document.getElementById('stats') ? document.getElementById('stats').textContent : '',"
        " error: document.getElementById('error') ? document.getElementById('error').textContent : ''})";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      const json r = dt.Call("Runtime.evaluate", {{"expression", probe}, {"returnByValue", true}}, session);
      if (r.is_object() && r["result"].contains("value")) {
        page = json::parse(r["result"]["value"].get<std::string>(), nullptr, false);
        if (page.is_object() && (page["state"] == "done" || page["state"] == "error")) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  std::filesystem::remove_all(profile);
  ASSERT_TRUE(page.is_object()) << "the page never answered";
  ASSERT_EQ(page["state"], "done") << page.dump();
  EXPECT_GT(page["draft"].get<int>(), 0) << "no accepted-draft token shown: " << page.dump();
  EXPECT_GT(page["target"].get<int>(), 0) << "no target token shown: " << page.dump();
  const std::string stats = page["stats"];
  EXPECT_NE(stats.find("tok/s"), std::string::npos) << stats;
  EXPECT_NE(stats.find("tau"), std::string::npos) << stats;
  EXPECT_EQ(stats.find("(live)"), std::string::npos) << "the final tau from the server was not shown: " << stats;
}

}  // namespace
}  // namespace dspark::serve
