/* The sandbox's in-box agent, compiled: what sandbox_init.py does, without an
 * interpreter's start (a box's start costs bwrap's and this program's, ~0.3 ms).
 * The worker compiles it once per process where it has a C compiler
 * (episodes/runtimes/sandbox/agent.py) and runs sandbox_init.py otherwise; the two
 * speak the same protocol, described in sandbox_init.py.
 *
 * usage: sandbox_init CONTROL_FD [RLIMITS]
 *
 * On the host it also starts a box, in place of `sh` (entering the box's cgroup) and
 * `setpriv --pdeathsig KILL` (dying with the worker), one exec instead of two:
 *
 *        sandbox_init --launch N CGROUP_PROCS_FILE... -- BWRAP ARGS...
 *
 * And in the box, the relay of episodes/tunnel/relay.py (the box's loopback to a
 * service's Unix socket; the same ready line, the same bytes both ways):
 *
 *        sandbox_init --relay SOCKET
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FRAME_MAX (16 * 1024 * 1024)
#define FDS_MAX 64
#define SWEEP_ROUNDS 20

static int sock = -1;
static char *buf;
static size_t buf_len, buf_cap;
static int fdq[1024];
static int fdq_len;

static void say(const char *line) {
    size_t n = strlen(line), off = 0;
    while (off < n) {
        ssize_t w = write(sock, line + off, n - off);
        if (w < 0) {
            if (errno == EINTR) continue;
            _exit(0); /* the worker is gone: so is the box */
        }
        off += (size_t)w;
    }
}

/* A JSON string of s: printable ASCII kept, anything else a space. */
static void quoted(char *out, size_t cap, const char *s) {
    size_t o = 0;
    out[o++] = '"';
    for (; *s && o + 2 < cap && o < 500; s++) {
        unsigned char c = (unsigned char)*s;
        out[o++] = (c >= 32 && c < 127 && c != '"' && c != '\\') ? (char)c : ' ';
    }
    out[o++] = '"';
    out[o] = 0;
}

static void reply_error(long id, int err, const char *text) {
    char q[600], line[700];
    quoted(q, sizeof q, text);
    snprintf(line, sizeof line, "{\"id\": %ld, \"error\": %s, \"errno\": %d}\n", id, q, err);
    say(line);
}

/* The fields of a frame body: NUL-terminated strings. */
struct fields {
    char **v;
    size_t n;
};

static int split(char *body, size_t len, struct fields *f) {
    size_t count = 0;
    for (size_t i = 0; i < len; i++) count += body[i] == 0;
    if (len == 0 || body[len - 1] != 0) return -1;
    f->v = calloc(count + 1, sizeof(char *));
    if (!f->v) return -1;
    f->n = 0;
    for (size_t i = 0; i < len; i += strlen(body + i) + 1) f->v[f->n++] = body + i;
    return 0;
}

static void spawn(long id, struct fields *f) {
    /* spawn ID CWD ARGC ARGV... ENVC ENV... */
    int fds[3], have = fdq_len >= 3;
    for (int i = 0; i < 3; i++) fds[i] = have ? fdq[i] : -1;
    if (have) {
        memmove(fdq, fdq + 3, (size_t)(fdq_len - 3) * sizeof(int));
        fdq_len -= 3;
    }
    size_t argc = f->n > 3 ? strtoul(f->v[3], NULL, 10) : 0;
    size_t envc = f->n > 4 + argc ? strtoul(f->v[4 + argc], NULL, 10) : 0;
    if (!have || argc == 0 || f->n != 5 + argc + envc) {
        reply_error(id, 0, "bad spawn request");
        for (int i = 0; i < 3; i++)
            if (fds[i] >= 0) close(fds[i]);
        return;
    }
    const char *cwd = f->v[2];
    char **argv = calloc(argc + 1, sizeof(char *));
    char **envp = calloc(envc + 1, sizeof(char *));
    if (!argv || !envp) {
        reply_error(id, ENOMEM, "out of memory");
        for (int i = 0; i < 3; i++) close(fds[i]);
        free(argv);
        free(envp);
        return;
    }
    for (size_t i = 0; i < argc; i++) argv[i] = f->v[4 + i];
    for (size_t i = 0; i < envc; i++) envp[i] = f->v[5 + argc + i];
    const char *path = "/usr/local/bin:/usr/bin:/bin";
    for (size_t i = 0; i < envc; i++)
        if (strncmp(envp[i], "PATH=", 5) == 0) path = envp[i] + 5;
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) < 0) {
        reply_error(id, errno, strerror(errno));
        for (int i = 0; i < 3; i++) close(fds[i]);
        free(argv);
        free(envp);
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        int err = 0;
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        setsid(); /* its own group: signals reach what it spawns */
        for (int i = 0; i < 3; i++)
            if (dup2(fds[i], i) < 0) goto failed;
        /* Every fd of this agent is close-on-exec; what bwrap may have left open: */
        if (pipefd[1] > 3) syscall(SYS_close_range, 3, pipefd[1] - 1, 0);
        syscall(SYS_close_range, pipefd[1] + 1, ~0U, 0);
        signal(SIGPIPE, SIG_DFL);
        if (*cwd && chdir(cwd) < 0) goto failed;
        if (strchr(argv[0], '/')) {
            execve(argv[0], argv, envp);
            goto failed;
        }
        for (const char *p = path;;) {
            const char *end = strchrnul(p, ':');
            char full[4096];
            int n = snprintf(full, sizeof full, "%.*s/%s", (int)(end - p), end == p ? "." : p,
                             argv[0]);
            if (end == p) n = snprintf(full, sizeof full, "./%s", argv[0]);
            if (n > 0 && (size_t)n < sizeof full) {
                execve(full, argv, envp);
                if (err == 0 || err == ENOENT || err == ENOTDIR) err = errno;
            }
            if (!*end) break;
            p = end + 1;
        }
        errno = err ? err : ENOENT;
    failed:
        err = errno;
        (void)!write(pipefd[1], &err, sizeof err);
        _exit(127);
    }
    int saved = errno;
    close(pipefd[1]);
    for (int i = 0; i < 3; i++) close(fds[i]);
    free(argv);
    free(envp);
    if (pid < 0) {
        close(pipefd[0]);
        reply_error(id, saved, strerror(saved));
        return;
    }
    int err = 0;
    ssize_t r;
    do r = read(pipefd[0], &err, sizeof err);
    while (r < 0 && errno == EINTR);
    close(pipefd[0]);
    if (r > 0) {
        waitpid(pid, NULL, 0);
        reply_error(id, err, strerror(err));
        return;
    }
    char line[100];
    snprintf(line, sizeof line, "{\"id\": %ld, \"pid\": %d}\n", id, (int)pid);
    say(line);
}

static void reap(void) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        char line[100];
        snprintf(line, sizeof line, "{\"exit\": %d, \"code\": %d}\n", (int)pid, code);
        say(line);
    }
}

static void sweep(long id) {
    pid_t me = getpid();
    char line[100];
    for (int round = 0; round < SWEEP_ROUNDS; round++) {
        int left = 0;
        DIR *d = opendir("/proc");
        struct dirent *e;
        while (d && (e = readdir(d))) {
            char *end;
            long pid = strtol(e->d_name, &end, 10);
            if (*end || pid <= 1 || pid == me) continue;
            char name[64], stat[1024];
            snprintf(name, sizeof name, "/proc/%ld/stat", pid);
            int fd = open(name, O_RDONLY | O_CLOEXEC);
            if (fd < 0) continue;
            ssize_t n = read(fd, stat, sizeof stat - 1);
            close(fd);
            if (n <= 0) continue;
            stat[n] = 0;
            char *paren = strrchr(stat, ')');
            if (!paren || (paren[1] == ' ' && paren[2] == 'Z')) continue;
            left++;
            kill((pid_t)pid, SIGKILL);
        }
        if (d) closedir(d);
        if (!left) {
            snprintf(line, sizeof line, "{\"id\": %ld, \"clean\": true}\n", id);
            say(line);
            return;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    snprintf(line, sizeof line, "{\"id\": %ld, \"clean\": false}\n", id);
    say(line);
}

static void handle(char *body, size_t len) {
    struct fields f = {0};
    if (split(body, len, &f) < 0 || f.n < 2) {
        free(f.v);
        return;
    }
    long id = strtol(f.v[1], NULL, 10);
    char line[100];
    if (strcmp(f.v[0], "spawn") == 0) {
        spawn(id, &f);
    } else if (strcmp(f.v[0], "signal") == 0 && f.n == 4) {
        long pid = strtol(f.v[2], NULL, 10);
        if (pid > 1) kill(-(pid_t)pid, (int)strtol(f.v[3], NULL, 10)); /* a group of ours */
        snprintf(line, sizeof line, "{\"id\": %ld, \"ok\": true}\n", id);
        say(line);
    } else if (strcmp(f.v[0], "sweep") == 0) {
        sweep(id);
    }
    free(f.v);
}

/* One recvmsg: fds queued, whole frames handled. 0 at the worker's end. */
static int receive(void) {
    if (buf_cap - buf_len < 65536) {
        buf_cap = buf_len + 65536;
        buf = realloc(buf, buf_cap);
        if (!buf) _exit(1);
    }
    char control[CMSG_SPACE(FDS_MAX * sizeof(int))];
    struct iovec iov = {buf + buf_len, buf_cap - buf_len};
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) return errno == EINTR || errno == EAGAIN;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int *fds = (int *)CMSG_DATA(c);
        for (size_t i = 0; i < count; i++) {
            if (fdq_len < (int)(sizeof fdq / sizeof fdq[0])) fdq[fdq_len++] = fds[i];
            else close(fds[i]);
        }
    }
    if (n == 0) return 0;
    buf_len += (size_t)n;
    size_t off = 0;
    while (buf_len - off >= 4) {
        unsigned char *h = (unsigned char *)buf + off;
        uint32_t size = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
        if (size > FRAME_MAX) return 0;
        if (buf_len - off - 4 < size) {
            if (buf_cap < off + 4 + size) {
                buf_cap = off + 4 + size + 65536;
                buf = realloc(buf, buf_cap);
                if (!buf) _exit(1);
            }
            break;
        }
        handle(buf + off + 4, size);
        off += 4 + size;
    }
    memmove(buf, buf + off, buf_len - off);
    buf_len -= off;
    return 1;
}

static void rlimits(char *spec) {
    for (char *item = strtok(spec, ","); item; item = strtok(NULL, ",")) {
        char *eq = strchr(item, '=');
        if (!eq) continue;
        *eq = 0;
        rlim_t v = (rlim_t)strtoull(eq + 1, NULL, 10);
        struct rlimit lim = {v, v};
        int which = strcmp(item, "nproc") == 0    ? RLIMIT_NPROC
                    : strcmp(item, "fsize") == 0  ? RLIMIT_FSIZE
                    : strcmp(item, "nofile") == 0 ? RLIMIT_NOFILE
                    : strcmp(item, "data") == 0   ? RLIMIT_DATA
                                                  : -1;
        if (which < 0 || setrlimit(which, &lim) < 0) _exit(2);
    }
}

/* -- the relay ------------------------------------------------------------------------ */

#define RELAY_MAX 256
#define RELAY_BUF 65536
#define RELAY_CONNECT_S 2

struct half { /* bytes read from `from`, not yet written to `to` */
    int from, to;
    char *buf;
    size_t len, off;
    int eof; /* `from` ended: `to` shut down for writing once buf is flushed */
};

static struct half halves[2 * RELAY_MAX];

static void half_close(int i) { /* a pair: halves 2k and 2k+1 */
    int k = i & ~1;
    if (halves[k].from >= 0) close(halves[k].from);
    if (halves[k].to >= 0) close(halves[k].to);
    free(halves[k].buf);
    free(halves[k + 1].buf);
    memset(&halves[k], 0, 2 * sizeof halves[0]);
    halves[k].from = halves[k].to = halves[k + 1].from = halves[k + 1].to = -1;
}

static int relay(const char *path) {
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < 2 * RELAY_MAX; i++) halves[i].from = halves[i].to = -1;
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) < 0 || listen(ls, 128) < 0 ||
        getsockname(ls, (struct sockaddr *)&a, &alen) < 0)
        return 1;
    struct sockaddr_un u = {0};
    u.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof u.sun_path) return 1;
    strcpy(u.sun_path, path);
    char q[600], line[800];
    quoted(q, sizeof q, path);
    snprintf(line, sizeof line,
             "{\"type\": \"ready\", \"host\": \"127.0.0.1\", \"port\": %d, \"socket\": %s}\n",
             ntohs(a.sin_port), q);
    if (write(1, line, strlen(line)) < 0) return 1;
    struct pollfd p[1 + 2 * RELAY_MAX];
    int who[1 + 2 * RELAY_MAX];
    for (;;) {
        int n = 0;
        p[n] = (struct pollfd){ls, POLLIN, 0};
        who[n++] = -1;
        for (int i = 0; i < 2 * RELAY_MAX; i++) {
            struct half *h = &halves[i];
            if (h->from < 0) continue;
            if (h->len > h->off) /* wait until `to` can take more */
                p[n] = (struct pollfd){h->to, POLLOUT, 0};
            else if (!h->eof)
                p[n] = (struct pollfd){h->from, POLLIN, 0};
            else
                continue;
            who[n++] = i;
        }
        if (poll(p, (nfds_t)n, -1) < 0) {
            if (errno == EINTR) continue;
            return 1;
        }
        for (int j = 1; j < n; j++) {
            if (!p[j].revents) continue;
            int i = who[j];
            struct half *h = &halves[i];
            if (h->from < 0) continue; /* its pair closed in this round */
            if (h->len > h->off) {
                ssize_t w = write(h->to, h->buf + h->off, h->len - h->off);
                if (w < 0 && errno != EAGAIN && errno != EINTR) {
                    half_close(i);
                    continue;
                }
                if (w > 0) h->off += (size_t)w;
                if (h->off == h->len) h->off = h->len = 0;
            } else {
                ssize_t r = read(h->from, h->buf, RELAY_BUF);
                if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
                if (r <= 0) { /* pass the end of this direction on (HTTP half-closes) */
                    h->eof = 1;
                    shutdown(h->to, SHUT_WR);
                    if (halves[i ^ 1].eof || r < 0) half_close(i);
                    continue;
                }
                h->len = (size_t)r;
                h->off = 0;
            }
        }
        if (p[0].revents) {
            int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (c < 0) continue;
            int k = -1;
            for (int i = 0; i < 2 * RELAY_MAX; i += 2)
                if (halves[i].from < 0) {
                    k = i;
                    break;
                }
            int s = k < 0 ? -1 : socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
            /* A bridge whose backlog is full (a harness opening connections faster than
             * the worker takes them) blocks connect: at most RELAY_CONNECT_S, never every
             * other connection of this relay for as long as it lasts. */
            struct timeval tv = {RELAY_CONNECT_S, 0};
            if (s >= 0) setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
            if (s < 0 || connect(s, (struct sockaddr *)&u, sizeof u) < 0) {
                /* no bridge (yet, or any more): the client sees its connection closed */
                fprintf(stderr, "relay: cannot connect to %s: %s\n", path, strerror(errno));
                if (s >= 0) close(s);
                close(c);
                continue;
            }
            fcntl(s, F_SETFL, O_NONBLOCK);
            char *b0 = malloc(RELAY_BUF), *b1 = malloc(RELAY_BUF);
            if (!b0 || !b1) {
                free(b0);
                free(b1);
                close(s);
                close(c);
                continue;
            }
            halves[k] = (struct half){c, s, b0, 0, 0, 0};
            halves[k + 1] = (struct half){s, c, b1, 0, 0, 0};
        }
    }
}

/* Into the box's cgroup(s), die with the worker's thread that forked us, exec bwrap. */
static int launch(int argc, char **argv) {
    pid_t parent = getppid();
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() != parent) return 125;
    int n = argc > 2 ? atoi(argv[2]) : -1, at = 3;
    if (n < 0 || argc < at + n + 2 || strcmp(argv[at + n], "--") != 0) return 125;
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%d", (int)getpid());
    for (int i = 0; i < n; i++) {
        int fd = open(argv[at + i], O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, pid, (size_t)len) != len) return 125;
        close(fd);
    }
    execv(argv[at + n + 1], argv + at + n + 1);
    return 127;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--launch") == 0) return launch(argc, argv);
    if (argc == 3 && strcmp(argv[1], "--relay") == 0) return relay(argv[2]);
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    if (argc < 2) return 2;
    if (argc > 2) rlimits(argv[2]);
    sock = atoi(argv[1]);
    fcntl(sock, F_SETFD, FD_CLOEXEC);
    signal(SIGPIPE, SIG_IGN); /* a write to a gone worker fails; children get SIG_DFL */
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) return 3;
    say("{\"ready\": true}\n");
    struct pollfd p[2] = {{sock, POLLIN, 0}, {sfd, POLLIN, 0}};
    for (;;) {
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            return 4;
        }
        if (p[1].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) > 0) {
            }
            reap();
        }
        if (p[0].revents && !receive()) return 0;
    }
}
