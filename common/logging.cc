#include "common/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>

namespace ferry {
namespace {

// %* in a pattern: the message, escaped for a JSON string.
class JsonMessageFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm& /*tm*/,
              spdlog::memory_buf_t& dest) override {
    std::string escaped = JsonEscape(std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(escaped.data(), escaped.data() + escaped.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

LogFormat installed_format = LogFormat::kText;

}  // namespace

LogFormat CurrentLogFormat() { return installed_format; }

Result<LogFormat> ParseLogFormat(std::string_view text) {
  if (text == "text") {
    return LogFormat::kText;
  }
  if (text == "json") {
    return LogFormat::kJson;
  }
  return InvalidArgument("--log-format: expected 'text' or 'json', got '" + std::string(text) +
                         "'");
}

std::string JsonEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[(c >> 4) & 0xf];
          out += kHex[c & 0xf];
        } else {
          out += c;
        }
    }
  }
  return out;
}

Status InitLogging(std::string_view process, LogFormat format, std::string_view level) {
  spdlog::level::level_enum parsed = spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off") {
    return InvalidArgument("--log-level: unknown level '" + std::string(level) +
                           "' (expected trace, debug, info, warn, error, critical or off)");
  }
  auto logger = spdlog::stderr_color_mt(std::string(process));
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  if (format == LogFormat::kJson) {
    formatter->add_flag<JsonMessageFlag>('*').set_pattern(
        R"({"ts":"%Y-%m-%dT%H:%M:%S.%f%z","level":"%l","logger":"%n","pid":%P,"msg":"%*"})");
  } else {
    formatter->set_pattern(kTextLogPattern);
  }
  installed_format = format;
  logger->set_formatter(std::move(formatter));
  logger->set_level(parsed);
  spdlog::set_default_logger(std::move(logger));
  return OkStatus();
}

}  // namespace ferry
