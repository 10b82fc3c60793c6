// How a CPU launch is left early (included by kk_cpu_sched.h, after the launch record).
// While a launch runs, its workers are listed in it (pthread_t, and the sigjmp_buf of the one
// block loop each runs). A signal handler finds the thread it runs on there and siglongjmps
// out of the block, abandoning it:
//  * SIGINT (a launch from Python's main thread, or with a time limit): the first marks the
//    launch stopped, goes on to the handler it replaced (Python raises KeyboardInterrupt) and
//    kicks every other worker with SIGURG;
//  * the time limit: a watchdog thread (kk_watchdog in kk_cpu_sched.h) marks it and kicks;
//  * SIGSEGV/SIGBUS in a worker: a fault naming the block and thread and pointing at check=True.
// Handlers are installed per launch (one sigaction each way per signal) and restored only where
// still ours, so no unloaded library's handler is left behind. Limit: launches of two libraries
// in two threads whose installs and restores interleave (A on, B on, A off, B off) leave A's
// handler installed; once A is unloaded, such a signal ends the process (as it would have).
// No thread_local is read in a handler (the first touch of a dlopen'd library's TLS may
// allocate). Limits: a body stopped while holding a lock of its own or inside printf may leave
// that lock held; destructors of the body's locals do not run. A SIGINT in the microseconds
// between Python's call and the launch's install is Python's alone: it raises after the launch
// ends, and a second Ctrl-C stops the launch.
#pragma once

#define KK_KICK SIGURG  // to workers only; ignored by default (Go's runtime uses it likewise)
static kk_launch* volatile kk_active;     // the launch signals may stop (launches are serial)
static struct sigaction kk_prev_int, kk_prev_kick;
static thread_local long long kk_next_limit_ns;  // set by kk_set_time_limit for the next launch

static void kk_on_kick(int, siginfo_t*, void*);
static volatile sig_atomic_t kk_kick_on;  // kk_on_kick is installed (by the first kick)

// The worker slots of L taken so far. A slot is taken (nworkers) before its thread is stored in
// it, so a taken slot may still read 0: skip it, never stop there (a worker stored after it would
// go unkicked, spinning in its block). A worker not yet stored reads `stopped` before its first
// block and leaves.
static int kk_claimed(kk_launch* L) {
  const int n = L->nworkers.load();
  return n < 256 ? n : 256;
}

// The slot of L this thread works in, or -1 (a handler's question: which block loop to leave).
static int kk_my_slot(kk_launch* L) {
  const pthread_t self = pthread_self();
  for (int i = 0, n = kk_claimed(L); i < n; ++i) {
    const pthread_t t = L->workers[i].load();
    if (t && pthread_equal(t, self)) return i;
  }
  return -1;
}

static void kk_kick(kk_launch* L) {  // every other worker of L into kk_on_kick
  if (!kk_kick_on) {  // (sigaction is async-signal-safe: a handler may call this)
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sa.sa_sigaction = kk_on_kick;
    if (sigaction(KK_KICK, &sa, &kk_prev_kick) != 0) return;
    kk_kick_on = 1;
  }
  const pthread_t self = pthread_self();
  for (int i = 0, n = kk_claimed(L); i < n; ++i) {
    const pthread_t t = L->workers[i].load();
    if (t && !pthread_equal(t, self)) pthread_kill(t, KK_KICK);
  }
}

static void kk_on_kick(int, siginfo_t*, void*) {
  kk_launch* L = kk_active;
  if (!L || !L->stopped.load()) return;
  const int i = kk_my_slot(L);
  sigjmp_buf* jb = i < 0 ? nullptr : L->escape[i];
  if (jb) siglongjmp(*jb, 1);
}

static void kk_on_sigint(int sig, siginfo_t* info, void* ctx) {
  kk_launch* L = kk_active;
  int was = 0;
  if (L && L->stopped.compare_exchange_strong(was, 1)) kk_kick(L);
  if (kk_prev_int.sa_flags & SA_SIGINFO)  // Python's handler: KeyboardInterrupt after the launch
    kk_prev_int.sa_sigaction(sig, info, ctx);
  else if (kk_prev_int.sa_handler != SIG_DFL && kk_prev_int.sa_handler != SIG_IGN)
    kk_prev_int.sa_handler(sig);
  kk_on_kick(sig, info, ctx);
}

static bool kk_is(const struct sigaction& a, void (*h)(int, siginfo_t*, void*)) {
  return (a.sa_flags & SA_SIGINFO) && a.sa_sigaction == h;
}

// A worker that faults (SIGSEGV) inside a block: the launch ends with a fault that names the
// block and thread and points at checked mode (memory around the arrays may be damaged).
static struct sigaction kk_prev_segv, kk_prev_bus;
#ifdef KK_CPU_CHECKED
#define KK_SEGV_HINT                                                                             \
  "an access checked mode does not see (a __shared__ array, or a plain pointer such as "        \
  "`float* p = y + 64`: index the parameter itself, or declare `auto p = y + 64`, to check it)"
#else
#define KK_SEGV_HINT                                                                             \
  "an access outside the arrays? Run it with check=True (KERNELKIT_CPU_CHECK=1) to find it"
#endif
static void kk_on_segv(int sig, siginfo_t* info, void* ctx) {
  kk_launch* L = kk_active;
  const int i = L ? kk_my_slot(L) : -1;
  sigjmp_buf* jb = i < 0 ? nullptr : L->escape[i];
  if (jb) {
    kk_fault_record(
        "%s (address %p) in block (%u,%u,%u) thread (%u,%u,%u): %s; memory near the arrays "
        "may have been overwritten",
        sig == SIGBUS ? "bus error" : "segmentation fault", info ? info->si_addr : nullptr,
        blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z, KK_SEGV_HINT);
    siglongjmp(*jb, 1);
  }
  // not a worker in a block: what was there before handles it (the access faults again)
  sigaction(sig, sig == SIGBUS ? &kk_prev_bus : &kk_prev_segv, nullptr);
  (void)ctx;
}

static thread_local int kk_main_thread = -1;  // this thread is the process's first (cached)

// Routes SIGINT to kk_on_sigint for a launch from the main thread, or with a time limit, where a
// handler (Python's) is installed; one syscall. Returns whether it did.
static bool kk_signals_on(bool limited) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sa.sa_sigaction = kk_on_segv;
  sigaction(SIGSEGV, &sa, &kk_prev_segv);
  sigaction(SIGBUS, &sa, &kk_prev_bus);
  if (kk_main_thread < 0) kk_main_thread = getpid() == (pid_t)syscall(SYS_gettid);
  if (!kk_main_thread && !limited) return false;
  sa.sa_sigaction = kk_on_sigint;
  struct sigaction prev;
  if (sigaction(SIGINT, &sa, &prev) != 0) return false;
  if (kk_is(prev, kk_on_sigint)) return false;  // (cannot happen: launches are serial)
  kk_prev_int = prev;
  if (!(prev.sa_flags & SA_SIGINFO) && (prev.sa_handler == SIG_DFL || prev.sa_handler == SIG_IGN)) {
    sigaction(SIGINT, &prev, nullptr);  // nobody handles Ctrl-C: it keeps its default
    return false;
  }
  return true;
}

// Restores what kk_signals_on and kk_kick replaced, where ours is still installed.
static void kk_signals_off(bool on) {
  struct sigaction cur;
  if (sigaction(SIGSEGV, &kk_prev_segv, &cur) == 0 && !kk_is(cur, kk_on_segv))
    sigaction(SIGSEGV, &cur, nullptr);  // someone else's since: theirs stays
  if (sigaction(SIGBUS, &kk_prev_bus, &cur) == 0 && !kk_is(cur, kk_on_segv))
    sigaction(SIGBUS, &cur, nullptr);
  if (on && sigaction(SIGINT, &kk_prev_int, &cur) == 0 && !kk_is(cur, kk_on_sigint))
    sigaction(SIGINT, &cur, nullptr);  // someone else's since: theirs stays
  if (kk_kick_on) {
    kk_kick_on = 0;
    if (sigaction(KK_KICK, nullptr, &cur) == 0 && kk_is(cur, kk_on_kick))
      sigaction(KK_KICK, &kk_prev_kick, nullptr);
  }
}

