// The playground page served at GET /: one self-contained HTML document (inline CSS and JS, no
// external assets) compiled into the binary. It streams /v1/completions or /v1/chat/completions
// and colours each token by the dspark_source extension field (accepted draft vs target-sampled),
// with live tok/s and tau. `?prompt=...&max_tokens=N&autorun=1` runs a prompt on load (e2e test).
#pragma once

#include <string_view>

namespace dspark::serve {

std::string_view PlaygroundHtml();

}  // namespace dspark::serve
