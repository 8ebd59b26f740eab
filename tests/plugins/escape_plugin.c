/* A hostile hook plugin for the sandbox tests: its preprocess tries the escape its config
 * names and reports what happened; with a config "create:ACTION" its create() tries it (and
 * fails with the report), as a plugin would before the serving sandbox is entered. "refused: ..." when the kernel said no, "ESCAPED: ..." when
 * the action succeeded (the test fails on that). Actions that cannot be refused (a wild
 * write) kill the host instead, which is the other allowed outcome. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ferry/plugin.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  char action[64];
} escape_state;

static int32_t report(ferry_error* error, int escaped, const char* what) {
  snprintf(error->message, sizeof(error->message), "%s: %s (%s)", escaped ? "ESCAPED" : "refused",
           what, escaped ? "no error" : strerror(errno));
  error->code = FERRY_ERR_INTERNAL;
  return FERRY_ERR_INTERNAL;
}

static void* idle_thread(void* arg) { return arg; }
static void* lingering_thread(void* arg) {
  for (;;) {
    pause();
  }
  return arg;
}

/* Tries `action`; returns the report (or, for actions that cannot be refused, never). */
static int32_t attempt(const char* action, const ferry_tensor* inputs, uint32_t num_inputs,
                       ferry_error* error) {
  if (strcmp(action, "write_file") == 0) {
    int fd = open("/tmp/ferry-escape-probe", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      close(fd);
      unlink("/tmp/ferry-escape-probe");
    }
    return report(error, fd >= 0, "create /tmp/ferry-escape-probe");
  }
  if (strcmp(action, "shm_write") == 0) {
    int fd = open("/dev/shm/ferry-escape-probe", O_RDWR | O_CREAT, 0600);
    if (fd >= 0) {
      close(fd);
      unlink("/dev/shm/ferry-escape-probe");
    }
    return report(error, fd >= 0, "open /dev/shm read-write");
  }
  if (strcmp(action, "linger") == 0) { /* A thread left running: create() then succeeds. */
    /* The thread runs this object's code: keep it mapped when the host unloads the plugin. */
    Dl_info info;
    if (dladdr((void*)lingering_thread, &info) != 0 && info.dli_fname != NULL) {
      dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    }
    pthread_t thread;
    errno = pthread_create(&thread, NULL, lingering_thread, NULL);
    return errno == 0 ? FERRY_OK : report(error, 0, "start a lingering thread");
  }
  if (strcmp(action, "thread") == 0) {
    pthread_t thread;
    int rc = pthread_create(&thread, NULL, idle_thread, NULL);
    if (rc == 0) {
      pthread_join(thread, NULL);
    }
    errno = rc;
    return report(error, rc == 0, "start a thread");
  }
  errno = 0;
  if (strcmp(action, "open") == 0) {
    int fd = open("/etc/passwd", O_RDONLY);
    return report(error, fd >= 0, "open /etc/passwd");
  }
  if (strcmp(action, "connect") == 0) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
      return report(error, 0, "socket");
    }
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_port = htons(1);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = connect(fd, (struct sockaddr*)&addr, sizeof(addr));
    /* ECONNREFUSED means the connect was attempted: an escape. */
    return report(error, rc == 0 || errno == ECONNREFUSED, "connect 127.0.0.1");
  }
  if (strcmp(action, "execve") == 0) {
    char* argv[] = {"/bin/sh", "-c", "true", NULL};
    execve("/bin/sh", argv, NULL);
    return report(error, 0, "execve /bin/sh");
  }
  if (strcmp(action, "fork") == 0) {
    pid_t pid = fork();
    if (pid == 0) {
      _exit(0);
    }
    if (pid > 0) {
      waitpid(pid, NULL, 0);
    }
    return report(error, pid >= 0, "fork");
  }
  if (strcmp(action, "ptrace") == 0) {
    long rc = ptrace(PTRACE_ATTACH, getppid(), NULL, NULL);
    return report(error, rc == 0, "ptrace the parent");
  }
  if (strcmp(action, "io_uring") == 0) {
    char params[120];
    memset(params, 0, sizeof(params));
    long fd = syscall(__NR_io_uring_setup, 8, params);
    return report(error, fd >= 0, "io_uring_setup");
  }
  if (strcmp(action, "exec_memory") == 0) {
    void* p =
        mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return report(error, p != MAP_FAILED, "mmap PROT_EXEC");
  }
  if (strcmp(action, "kill_parent") == 0) {
    int rc = kill(getppid(), SIGKILL);
    return report(error, rc == 0, "kill the parent");
  }
  if (strcmp(action, "wild_write") == 0) {
    /* Scribble page by page past the input tensor until something faults. */
    volatile char* p = (volatile char*)(num_inputs > 0 ? inputs[0].data : (const void*)&action);
    for (;;) {
      *p = 0x5a;
      p += 4096;
    }
  }
  if (strcmp(action, "crash") == 0) {
    abort();
  }
  if (strcmp(action, "sleep") == 0) { /* Stuck, but burning no CPU. */
    for (;;) {
      struct timespec t = {1000, 0};
      nanosleep(&t, NULL);
    }
  }
  if (strcmp(action, "spin") == 0) {
    for (;;) {
    }
  }
  if (strcmp(action, "inheritable_fds") == 0) { /* A descriptor an exec would keep. */
    for (int fd = 3; fd < 4096; ++fd) {
      int flags = fcntl(fd, F_GETFD);
      if (flags >= 0 && (flags & FD_CLOEXEC) == 0) {
        char what[64];
        snprintf(what, sizeof(what), "descriptor %d is inheritable", fd);
        errno = 0;
        return report(error, 1, what);
      }
    }
    errno = EBADF;
    return report(error, 0, "inheritable_fds (every descriptor past 2 close-on-exec)");
  }
  if (strcmp(action, "forge_log") == 0) { /* One of ferryd's lines, on stdout and stderr. */
    static const char kForged[] = "2026-01-01 00:00:00.000 error ferryd[1] forged by a plugin\n";
    ssize_t a = write(1, kForged, sizeof(kForged) - 1);
    ssize_t b = write(2, kForged, sizeof(kForged) - 1);
    errno = 0;
    return report(error, 0, a > 0 || b > 0 ? "forge_log (written, relayed)" : "forge_log");
  }
  snprintf(error->message, sizeof(error->message), "unknown action '%s'", action);
  return FERRY_ERR_INVALID_ARGUMENT;
}


static int32_t escape_create(const char* config, void** state, ferry_error* error) {
  if (strncmp(config, "create:", 7) == 0) {
    errno = 0;
    int32_t rc = attempt(config + 7, NULL, 0, error);
    if (rc != FERRY_OK) {
      return rc;
    }
  }
  escape_state* s = calloc(1, sizeof(escape_state));
  if (s == NULL) {
    return FERRY_ERR_INTERNAL;
  }
  snprintf(s->action, sizeof(s->action), "%s", config);
  *state = s;
  return FERRY_OK;
}

static void escape_destroy(void* state) { free(state); }

static int32_t escape_preprocess(void* state, const ferry_tensor* inputs, uint32_t num_inputs,
                                 ferry_outputs* outputs, ferry_error* error) {
  (void)outputs;
  errno = 0;
  return attempt(((escape_state*)state)->action, inputs, num_inputs, error);
}

static const ferry_plugin kEscape = {FERRY_PLUGIN_ABI_VERSION,
                                     sizeof(ferry_plugin),
                                     FERRY_PLUGIN_PRESERVES_ROWS,
                                     "escape",
                                     escape_create,
                                     escape_destroy,
                                     escape_preprocess,
                                     NULL,
                                     NULL};

const ferry_plugin* ferry_plugin_entry_v2(void) { return &kEscape; }
