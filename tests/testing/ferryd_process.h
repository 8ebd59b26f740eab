// A ferryd process for end-to-end tests: started with fork + exec on a node file in a
// temporary directory, controlled through its real control socket (control/control_client.h).
//
// Thread safety: one test thread.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "control/control_client.h"
#include "shm/segment.h"
#include "tests/testing/temp_dir.h"

extern "C" char** environ;

namespace ferry::testing {

// A node name unique to this test process and call (the segment is "ferry-<name>").
inline std::string UniqueNodeName() {
  static std::atomic<int> counter{0};
  return "t" + std::to_string(getpid()) + "_" + std::to_string(counter.fetch_add(1));
}

// The example models, linked into `dir`/models.
inline std::string ExampleRepository(const TempDir& dir) {
  std::string repo = dir / "models";
  std::filesystem::create_directories(repo);
  for (const char* model : {"cnn", "mlp"}) {
    // Copied: a bundle linked from outside the repository is refused (model/repository.h).
    std::filesystem::copy(std::filesystem::current_path() / "examples/models" / model,
                          repo + "/" + model, std::filesystem::copy_options::recursive);
  }
  return repo;
}

class FerrydProcess {
 public:
  // Writes the node file ([node] name, repository, control socket; `extra` appended) and
  // starts ferryd on it. `node_extra` goes inside [node].
  FerrydProcess(const TempDir& dir, const std::string& node_extra, const std::string& extra,
                std::vector<std::string> flags = {})
      : name_(UniqueNodeName()), socket_(dir / "control.sock"), log_(dir / "ferryd.log") {
    config_ = dir / "node.toml";
    WriteFile(config_, "[node]\nname = \"" + name_ + "\"\nmodel_repository = \"" +
                           ExampleRepository(dir) + "\"\nshm_size = \"64MiB\"\n" + node_extra +
                           "\n[node.listen]\nhttp = \"127.0.0.1:0\"\ngrpc = \"127.0.0.1:0\"\n"
                           "metrics = \"127.0.0.1:0\"\nagent = \"127.0.0.1:0\"\n"
                           "[supervisor]\ncontrol_socket = \"" +
                           socket_ + "\"\n" + extra);
    Start(std::move(flags));
  }
  // A ferryd still running (a failed test) is killed, and what it left in /dev/shm removed
  // (its children die with it, PR_SET_PDEATHSIG).
  ~FerrydProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      shm::Segment::Remove(shm::Segment::NameForNode(name_));
    }
  }

  void Start(std::vector<std::string> flags = {}) { StartActivated({}, std::move(flags)); }

  // Starts ferryd as systemd socket activation would: `sockets` (name, listening descriptor)
  // become descriptors 3, 4, ... with LISTEN_FDS, LISTEN_PID and LISTEN_FDNAMES set.
  void StartActivated(const std::vector<std::pair<std::string, int>>& sockets,
                      std::vector<std::string> flags = {}) {
    std::vector<std::string> args = {FERRY_FERRYD_BINARY, "--config", config_};
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      env.emplace_back(*e);
    }
    std::string names;
    for (const auto& [name, fd] : sockets) {
      names += (names.empty() ? "" : ":") + name;
    }
    if (!sockets.empty()) {
      env.push_back("LISTEN_FDS=" + std::to_string(sockets.size()));
      env.push_back("LISTEN_FDNAMES=" + names);
      env.push_back("LISTEN_PID=0000000000");  // Filled in by the child: its own pid.
    }
    std::vector<char*> envp;
    for (std::string& e : env) {
      envp.push_back(e.data());
    }
    envp.push_back(nullptr);
    std::vector<char*> argv;
    for (std::string& a : args) {
      argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    char* listen_pid = sockets.empty() ? nullptr : envp[envp.size() - 2] + 11;
    pid_ = fork();
    if (pid_ == 0) {
      FILE* log = std::fopen(log_.c_str(), "a");
      if (log != nullptr) {
        dup2(fileno(log), 1);
        dup2(fileno(log), 2);
      }
      for (size_t i = 0; i < sockets.size(); ++i) {
        int moved = fcntl(sockets[i].second, F_DUPFD, 100);
        dup2(moved, static_cast<int>(3 + i));
      }
      if (listen_pid != nullptr) {
        std::snprintf(listen_pid, 11, "%d", static_cast<int>(getpid()));
      }
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
  }

  Result<nlohmann::json> Call(control::Command command) const {
    control::ControlRequest request;
    request.command = command;
    return Call(request);
  }
  Result<nlohmann::json> Call(const control::ControlRequest& request) const {
    return control::CallFerryd(socket_, request, 10'000);
  }
  Result<nlohmann::json> Status() const { return Call(control::Command::kStatus); }

  // The status once `pred` holds for it, polling every 20 ms; nullopt after `timeout_s`.
  std::optional<nlohmann::json> StatusWhen(const std::function<bool(const nlohmann::json&)>& pred,
                                           int timeout_s = 60) const {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      Result<nlohmann::json> s = Status();
      if (s.ok() && pred(*s)) {
        return *s;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return std::nullopt;
  }
  std::optional<nlohmann::json> WaitReady(int timeout_s = 60) const {
    return StatusWhen([](const nlohmann::json& s) { return s["state"] == "ready"; }, timeout_s);
  }

  // ferryd's exit status (as DescribeWaitStatus would read it), or -1 after `timeout_s`.
  int Wait(int timeout_s = 60) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }
  const std::string& config() const { return config_; }
  const std::string& socket() const { return socket_; }
  std::string log() const {
    std::ifstream in(log_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

 private:
  std::string name_;
  std::string socket_;
  std::string log_;
  std::string config_;
  pid_t pid_ = -1;
};

// The child of `kind` ("worker"/"hookhost") and `index` in a status reply.
inline nlohmann::json ChildOf(const nlohmann::json& status, const std::string& kind, int index) {
  for (const nlohmann::json& c : status["children"]) {
    if (c["kind"] == kind && c["index"] == index) {
      return c;
    }
  }
  return {};
}

inline bool ProcessGone(pid_t pid) {
  // A zombie counts as gone: it runs no more (its parent, killed, can no longer reap it
  // before init does).
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) {
    return true;
  }
  size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

inline std::string ReadFileText(const std::string& path) { return ReadFile(path); }

inline bool ShmExists(const std::string& object) {
  return std::filesystem::exists("/dev/shm/" + object);
}

}  // namespace ferry::testing
