// Stop-string handling for streamed text: holds back the tail that could still turn into a stop
// string, so a client never sees text that a later token reveals to be past the stop.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dspark {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);

  // Appends decoded text; returns the part that is now safe to emit. After a stop string is
  // found, stopped() is true and the returned text ends right before it.
  std::string Push(std::string_view text);
  // Returns the held-back tail at the end of generation (empty once stopped).
  std::string Flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace dspark
