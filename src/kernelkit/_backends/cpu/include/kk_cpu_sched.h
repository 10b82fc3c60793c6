// The CPU execution model (see ../DESIGN.md):
//  * A launch splits the grid's blocks over worker OS threads: the calling thread plus helpers
//    from a per-library pool (helpers exit after KK_CPU_IDLE_SECONDS idle).
//  * A block runs on one worker from start to end. A kernel that uses no barrier or warp
//    operation runs its threads as a plain loop ("loop mode"). Otherwise every CUDA thread is a
//    fiber with its own stack ("fiber mode"), switched by a hand-written context switch that saves
//    only callee-saved registers (no signal-mask syscall).
//  * __syncthreads: an arriving fiber switches straight to the next runnable fiber of the block;
//    the last to arrive releases the others and carries on; the end of a pass returns to the
//    block's scheduler, which starts the next one. Cost: about one context switch per thread per
//    barrier (measured by benchmarks/cpu_backend.py).
//  * Warp operations: each lane deposits a value and a source lane; the last lane to arrive
//    computes every lane's result, the others read theirs when resumed. Lanes meet the lanes
//    that named the same mask only (one rendezvous per distinct mask in flight, as shfl.sync's
//    membermask); differing masks that overlap are merged only when the block would deadlock.
//  * Exited threads no longer hold anything back (as on the GPU): a barrier waits for the
//    threads that have not returned, a warp operation for the lanes of its mask that have not.
//  * __activemask() is a rendezvous too: a lane waits there until every live lane of its warp
//    waits somewhere (a barrier, a warp operation, another __activemask) or has returned; the
//    lanes waiting at the same call form the mask, as a converged branch does on the GPU. A call
//    is named by its place in the source (file and line: a kk_site default argument), never
//    by a code address, which inlining and tail duplication change (GCC -O2 copies a call after
//    a data-dependent branch into both arms). Limit: lanes that reach one call through
//    different branches (a helper called from both sides of an `if`, or two calls on one line,
//    `c ? simd_max(a) : simd_min(b)`) count as converged.
//  * Tiles wider than a warp (thread_block_tile<64..1024>) synchronize through a per-tile
//    counter indexed by the tile's first thread.
//  * Cooperative launches (kernel(..., cooperative=True)): every block gets its own OS thread, so
//    that all blocks are live at once (at most KK_CPU_MAX_COOPERATIVE_BLOCKS, as a GPU fits only
//    so many). The blocks take turns, one pass of their fibers each (a turn passes at the end of
//    a pass, in block order), so they advance in step from barrier to barrier as co-resident
//    blocks do on a GPU: free-running OS threads let one block run far ahead, which exposed
//    write-after-read races that a GPU never shows (ggml's soft_max_f32_parallelize_cols
//    reuses its scratch across a grid sync). grid_group::sync() is a block barrier, then the
//    block's first thread through it arrives at the grid barrier and passes the turn until
//    every block that has not finished has arrived.
//  * Cluster launches (cluster_dims): one cluster after another, each a cooperative launch of
//    its own blocks (kk_run_clusters); cluster_group::sync() is its barrier, map_shared_rank
//    finds another block's shared memory by offset (kk_cluster_map).
//  * Stopping: a launch from Python's main thread (or with a time limit) routes SIGINT through
//    kk_on_signal while it runs: the first signal marks the launch stopped, is passed on to the
//    handler it replaced (so Python raises KeyboardInterrupt), and is sent to every other
//    worker; a worker inside a block leaves it by siglongjmp (its block is abandoned, destructors
//    of the body's locals do not run; a body stopped while holding a lock of its own, or inside
//    printf, may leave that lock held). A time limit is a watchdog thread that does the same.
//  * A worker's SIGSEGV or SIGBUS inside a block (default mode: an access outside the arrays) ends the
//    launch the same way, with a fault that points at checked mode.
//  * Unloading: helpers are joinable threads and each worker's state is heap memory listed in
//    the pool (no thread_local destructors, which would pin the library): kk_unload stops and
//    joins the helpers and frees everything, after which the library can be dlclosed.
#pragma once

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/syscall.h>
#include <list>

#ifndef KK_CPU_FIBER_STACK_BYTES
#define KK_CPU_FIBER_STACK_BYTES (128 * 1024)
#endif
#ifndef KK_CPU_MAX_DYNAMIC_SHARED_BYTES
#define KK_CPU_MAX_DYNAMIC_SHARED_BYTES (227 * 1024)  // an H100's opt-in maximum per block
#endif
#ifndef KK_CPU_IDLE_SECONDS
#define KK_CPU_IDLE_SECONDS 2
#endif
#ifndef KK_CPU_MAX_COOPERATIVE_BLOCKS
#define KK_CPU_MAX_COOPERATIVE_BLOCKS 256  // an OS thread each; 132 SMs x 1 block is ggml's launch
#endif
#define KK_CPU_MAX_CLUSTER_BLOCKS 16  // sm_90's non-portable maximum (kernel() allows 8)

struct kk_fault {};  // thrown once the fault message is recorded; unwinds to the block's worker

struct kk_launch;
typedef void (*kk_block_fn)(const kk_launch&, uint3 block);
struct kk_block;
typedef void (*kk_thread_fn)(const void* args, uint3 tid, kk_block* block);

struct kk_launch {
  const void* args;
  kk_block_fn run_block;
  kk_thread_fn run_thread;  // fiber mode: one CUDA thread
  dim3 grid, block;
  unsigned long long nblocks, chunk;
  size_t shmem_bytes;
  std::atomic<unsigned long long> next{0};
  std::atomic<int> faulted{0};
  std::atomic<int> stopped{0};  // 1: SIGINT, 2: the time limit (workers leave their blocks)
  std::atomic<int> nworkers{0};
  std::atomic<pthread_t> workers[256];  // the OS threads working on it, 0 until known
  sigjmp_buf* volatile escape[256];     // where each leaves its blocks (null: not in blocks)
  char message[1024];
  // cooperative launches: the grid barrier (blocks not finished yet, arrivals, generation)
  bool cooperative = false;
  std::mutex grid_mu;
  unsigned long long grid_live = 0, grid_arrived = 0, grid_gen = 0;
  unsigned long long turn = 0;       // the block (linear index) whose fibers may run now
  std::vector<unsigned char> ended;  // per block: finished
  std::unique_ptr<std::condition_variable[]> turn_cv;  // per block: woken when its turn comes
  // cluster launches (kk_run_clusters): this launch is one cluster of the grid, its blocks
  // numbered by their rank in the cluster, from `cluster_origin`; each block records where its
  // shared memory is (its thread's TLS anchor and dynamic buffer) when it starts
  bool clustered = false;
  dim3 cluster{1, 1, 1};
  uint3 cluster_origin{0, 0, 0};
  std::atomic<char*> cl_anchor[KK_CPU_MAX_CLUSTER_BLOCKS];
  std::atomic<unsigned char*> cl_dsmem[KK_CPU_MAX_CLUSTER_BLOCKS];
};

static thread_local kk_launch* kk_cur_launch;
static thread_local unsigned char* kk_dsmem;
// Where this thread's copy of the kernel library's TLS block is: `__shared__` arrays are
// thread_locals of the same library, at the same offset from it in every thread's copy, so a
// block's array is found in another block of its cluster (map_shared_rank) by that offset.
static thread_local char kk_tls_anchor;
static thread_local char kk_last_fault[1024];

// Records the launch's first fault (later ones are dropped); the caller throws kk_fault.
__attribute__((format(printf, 1, 2), cold)) static void kk_fault_record(const char* fmt, ...) {
  kk_launch* L = kk_cur_launch;
  int expected = 0;
  if (!L || !L->faulted.compare_exchange_strong(expected, 1)) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(L->message, sizeof(L->message), fmt, ap);
  va_end(ap);
}

static inline void* kk_dynamic_smem() { return kk_dsmem; }

// --- fiber contexts ---------------------------------------------------------------------------
#if defined(__x86_64__) && !defined(KK_CPU_UCONTEXT)
asm(".text\n.p2align 4\n.globl kk_ctx_switch\n.hidden kk_ctx_switch\n"
    ".type kk_ctx_switch,@function\nkk_ctx_switch:\n"
    "pushq %rbp\npushq %rbx\npushq %r12\npushq %r13\npushq %r14\npushq %r15\n"
    "movq %rsp, (%rdi)\nmovq %rsi, %rsp\n"
    "popq %r15\npopq %r14\npopq %r13\npopq %r12\npopq %rbx\npopq %rbp\nret\n"
    ".size kk_ctx_switch, .-kk_ctx_switch\n");
#define KK_CTX_ASM 1
#define KK_CTX_FRAME_WORDS 8  // 6 saved registers, the entry address, a fake return address
#elif defined(__aarch64__) && !defined(KK_CPU_UCONTEXT)
asm(".text\n.p2align 4\n.globl kk_ctx_switch\n.hidden kk_ctx_switch\n"
    ".type kk_ctx_switch,%function\nkk_ctx_switch:\n"
    "sub sp, sp, #160\n"
    "stp x19, x20, [sp, #0]\nstp x21, x22, [sp, #16]\nstp x23, x24, [sp, #32]\n"
    "stp x25, x26, [sp, #48]\nstp x27, x28, [sp, #64]\nstp x29, x30, [sp, #80]\n"
    "stp d8, d9, [sp, #96]\nstp d10, d11, [sp, #112]\nstp d12, d13, [sp, #128]\n"
    "stp d14, d15, [sp, #144]\n"
    "mov x2, sp\nstr x2, [x0]\nmov sp, x1\n"
    "ldp x19, x20, [sp, #0]\nldp x21, x22, [sp, #16]\nldp x23, x24, [sp, #32]\n"
    "ldp x25, x26, [sp, #48]\nldp x27, x28, [sp, #64]\nldp x29, x30, [sp, #80]\n"
    "ldp d8, d9, [sp, #96]\nldp d10, d11, [sp, #112]\nldp d12, d13, [sp, #128]\n"
    "ldp d14, d15, [sp, #144]\n"
    "add sp, sp, #160\nret\n"
    ".size kk_ctx_switch, .-kk_ctx_switch\n");
#define KK_CTX_ASM 1
#define KK_CTX_FRAME_WORDS 20  // 160 bytes; x30 (the entry address) is word 11
#endif

#ifdef KK_CTX_ASM
extern "C" void kk_ctx_switch(void** save_sp, void* load_sp);
struct kk_ctx {
  void* sp;
};
static inline void kk_ctx_swap(kk_ctx* from, kk_ctx* to) { kk_ctx_switch(&from->sp, to->sp); }
// The lines a resumed fiber touches first: its saved registers and the frames just above them.
static inline void kk_ctx_prefetch(const kk_ctx* c) {
  const char* sp = (const char*)c->sp;
  __builtin_prefetch(sp, 1);
  __builtin_prefetch(sp + 64, 1);
  __builtin_prefetch(sp + 128, 1);
}
static inline void kk_ctx_make(kk_ctx* c, char* stack, size_t size, void (*entry)()) {
  void** top = (void**)(((uintptr_t)(stack + size)) & ~(uintptr_t)15);
  void** sp = top - KK_CTX_FRAME_WORDS;
  // Only the entry and the (null) return address above it matter: the other saved registers
  // are callee-saved garbage the entry never reads, so a fresh context costs two stores.
#if defined(__x86_64__)
  sp[6] = (void*)entry;  // popped by `ret`; the entry then sees rsp = top - 8, as after a call
  sp[7] = nullptr;       // a null return address ends unwinding
#else
  sp[10] = nullptr;       // x29: a null frame pointer ends unwinding
  sp[11] = (void*)entry;  // x30
#endif
  c->sp = sp;
}
#else
struct kk_ctx {
  ucontext_t uc;
};
static inline void kk_ctx_swap(kk_ctx* from, kk_ctx* to) { swapcontext(&from->uc, &to->uc); }
static inline void kk_ctx_prefetch(const kk_ctx*) {}
static inline void kk_ctx_make(kk_ctx* c, char* stack, size_t size, void (*entry)()) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack;
  c->uc.uc_stack.ss_size = size;
  c->uc.uc_link = nullptr;
  makecontext(&c->uc, entry, 0);
}
#endif

// --- one block as fibers ----------------------------------------------------------------------
enum : int { KK_RUN = 0, KK_BAR = 1, KK_WARP = 2, KK_DONE = 3, KK_TILE = 4 };

struct kk_fiber {
  kk_ctx ctx;
  int state;
  uint3 tid;
  unsigned grid_syncs;  // grid_group::sync() calls this thread has made
};

enum : unsigned char { KK_XCHG_SHFL = 0, KK_XCHG_MATCH = 1 };

// A place in the source: what tells __activemask() call sites apart. KK_SITE_PARAMS as default
// arguments are evaluated at the caller, so every copy the optimizer makes of one call (inlined,
// tail-duplicated, unrolled) carries the same site. (Two plain parameters: g++ 12 evaluates
// __builtin_LINE() inside a braced initializer at the declaration. It has no __builtin_COLUMN,
// and C++17 no source_location: two calls on one line are one site.)
struct kk_site {
  const char* file;
  int line;
};
#define KK_SITE_PARAMS const char *kk_file = __builtin_FILE(), int kk_line = __builtin_LINE()
static inline bool kk_same_site(const kk_site& a, const kk_site& b) {
  return a.line == b.line && (a.file == b.file || strcmp(a.file, b.file) == 0);
}

// One rendezvous in flight in a warp: the lanes that named the same mask (`key`, the lanes of
// the block in it, the caller included) meet each other only, as PTX's shfl.sync defines it.
struct kk_warp_group {
  unsigned key, arrived, pred;
  unsigned char op;  // what the exchange computes (KK_XCHG_*)
};

struct kk_warp_slot {  // one warp's rendezvous
  unsigned exited, valid;
  unsigned am_wait;  // lanes waiting in __activemask()
  unsigned ngroups;  // rendezvous in flight (groups[0, ngroups)); at most one per lane
  unsigned char src[32];
  kk_warp_group groups[32];
  unsigned long long val[32], res[32];
  unsigned res_ballot[32], res_group[32];
  kk_site am_site[32];  // the call site each __activemask() waiter is at
  unsigned am_res[32];
};

struct kk_block {
  kk_fiber* fibers;
  kk_warp_slot* warps;
  unsigned short* tile_arrived;  // wide-tile barriers: arrivals, by the tile's first thread
  unsigned short* tile_size;
  int tiles_pending;
  int n, done, arrived, cur;
  bool faulted;
  const char* bar_file;
  int bar_line;
  const kk_launch* L;
  unsigned grid_syncs;  // grid barriers this block has passed
  uint3* tid_slot;  // &threadIdx of this OS thread (saves a TLS lookup per switch)
  kk_ctx sched;
};

static thread_local kk_block* kk_cur_block;  // non-null while a block runs as fibers

#define KK_STACK_CANARY 0xA5
#define KK_STACK_CANARY_BYTES 1024  // below each stack, inside the stride's two spare pages

struct kk_worker {  // per OS thread, reused across blocks and launches
  char* stacks = nullptr;
  size_t map_bytes = 0, stride = 0;
  int cap = 0;
  kk_fiber* fibers = nullptr;
  kk_warp_slot* warps = nullptr;
  unsigned short* tile_counts = nullptr;  // 2n: arrivals, then sizes
  unsigned char* dsmem = nullptr;
  size_t dsmem_cap = 0;

  ~kk_worker() {
    if (stacks) munmap(stacks, map_bytes);
    delete[] fibers;
    delete[] warps;
    delete[] tile_counts;
    free(dsmem);
  }
  // One mapping, one VMA: each kernel library keeps its own workers, so per-stack guard pages
  // (two VMAs per fiber) ran a process out of vm.max_map_count after a few hundred fiber
  // kernels. Instead a canary fills the gap below every stack; kk_check_stacks reports a
  // thread that wrote into it, after its block (an overflow past the canary can still corrupt
  // the stack below before it is seen).
  void reserve_fibers(int n) {
    if (n <= cap) return;
    if (stacks) munmap(stacks, map_bytes);
    delete[] fibers;
    delete[] warps;
    delete[] tile_counts;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    stride = KK_CPU_FIBER_STACK_BYTES + 2 * page;
    map_bytes = stride * (size_t)n;
    void* m = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    stacks = (char*)m;
    mprotect(stacks, page, PROT_NONE);  // below the lowest stack: a fault, as on a guard page
    for (int i = 0; i < n; ++i) memset(canary(i), KK_STACK_CANARY, KK_STACK_CANARY_BYTES);
    fibers = new kk_fiber[n];
    warps = new kk_warp_slot[(n + 31) / 32];
    tile_counts = new unsigned short[2 * (size_t)n]();
    cap = n;
  }
  // Stack tops are staggered by 64 * (i % 61) bytes: equal strides would put every fiber's
  // hot frames in the same cache sets.
  char* stack(int i) const {
    return stacks + stride * (size_t)i + (stride - KK_CPU_FIBER_STACK_BYTES) - 64 * (i % 61);
  }
  char* canary(int i) const { return stack(i) - KK_STACK_CANARY_BYTES; }
  // the first fiber (of n) whose canary was written, or -1
  int overflowed(int n) const {
    for (int i = 0; i < n; ++i) {
      const unsigned char* c = (const unsigned char*)canary(i);
      for (int j = 0; j < KK_STACK_CANARY_BYTES; ++j)
        if (c[j] != KK_STACK_CANARY) return i;
    }
    return -1;
  }
  void reserve_dsmem(size_t bytes) {
    if (bytes <= dsmem_cap) return;
    free(dsmem);
    dsmem = (unsigned char*)aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!dsmem) throw std::bad_alloc();
    dsmem_cap = bytes;
  }
};

// Every worker of this library, so kk_unload can free them: a thread_local kk_worker would
// register a TLS destructor, and glibc keeps a library with pending ones mapped until the
// thread exits (for the calling Python thread: never).
static std::mutex kk_workers_mu;
static std::list<kk_worker*>* kk_workers;
static thread_local kk_worker* kk_my_worker;

static kk_worker& kk_this_worker() {
  if (__builtin_expect(!kk_my_worker, 0)) {
    kk_worker* w = new kk_worker();
    std::lock_guard<std::mutex> lk(kk_workers_mu);
    if (!kk_workers) kk_workers = new std::list<kk_worker*>();
    kk_workers->push_back(w);
    kk_my_worker = w;
  }
  return *kk_my_worker;
}

static void kk_free_my_worker() {  // a helper that exits
  kk_worker* w = kk_my_worker;
  if (!w) return;
  {
    std::lock_guard<std::mutex> lk(kk_workers_mu);
    kk_workers->remove(w);
  }
  kk_my_worker = nullptr;
  delete w;
}

static inline uint3 kk_tid_of(dim3 b, int t) {
  return uint3{(unsigned)t % b.x, ((unsigned)t / b.x) % b.y, (unsigned)t / (b.x * b.y)};
}

// Computes every result of group `gi` of warp `W`, wakes its lanes (but `self`, which runs) and
// retires the group.
static void kk_warp_resolve(kk_block* b, kk_warp_slot& W, unsigned gi, int base, int self) {
  const kk_warp_group g = W.groups[gi];
  W.groups[gi] = W.groups[--W.ngroups];
  const unsigned got = g.arrived, ballot = g.pred & got;
  for (unsigned m = got; m; m &= m - 1) {
    const int l = __builtin_ctz(m), s = W.src[l];
    if (g.op == KK_XCHG_MATCH) {  // the lanes holding the same value
      unsigned same = 0;
      for (unsigned k = got; k; k &= k - 1)
        if (W.val[__builtin_ctz(k)] == W.val[l]) same |= k & -k;
      W.res[l] = same;
    } else {
      W.res[l] = ((got >> s) & 1u) ? W.val[s] : W.val[l];
    }
    W.res_ballot[l] = ballot;
    W.res_group[l] = got;
    if (base + l != self) b->fibers[base + l].state = KK_RUN;
  }
}

// Every lane of the group's mask that has not returned is there.
static inline bool kk_group_ready(const kk_warp_group& g, unsigned exited) {
  const unsigned need = g.key & ~exited;
  return (g.arrived & need) == need;
}
static inline void kk_warp_resolve_ready(kk_block* b, kk_warp_slot& W, int base) {
  for (unsigned k = 0; k < W.ngroups;) {
    if (kk_group_ready(W.groups[k], W.exited)) kk_warp_resolve(b, W, k, base, -1);
    else ++k;
  }
}

// When no thread of the block can run, rendezvous whose masks overlap but differ (lanes that
// name different masks, each including the other: undefined on the GPU) are merged into one, as
// the emulation did before it kept masks apart; returns whether any lane was woken.
__attribute__((cold)) static bool kk_warp_merge_stalled(kk_block* b) {
  bool woke = false;
  for (int w = 0; w < (b->n + 31) / 32; ++w) {
    kk_warp_slot& W = b->warps[w];
    if (W.ngroups < 2) continue;
    for (unsigned i = 0; i < W.ngroups; ++i)
      for (unsigned j = i + 1; j < W.ngroups;) {
        kk_warp_group &a = W.groups[i], &c = W.groups[j];
        if (!(a.key & c.key)) {
          ++j;
          continue;
        }
        a.key |= c.key, a.arrived |= c.arrived, a.pred |= c.pred;
        W.groups[j] = W.groups[--W.ngroups];
        j = i + 1;  // the wider key may now overlap a group already passed
      }
    const unsigned before = W.ngroups;
    kk_warp_resolve_ready(b, W, w * 32);
    woke |= W.ngroups != before;
  }
  return woke;
}

// __activemask() waiters of warp `W` are released once every live lane of the warp waits (or has
// returned): each gets the set of waiters at its own call site. Called after a lane blocks.
static void kk_activemask_settle(kk_block* b, kk_warp_slot& W, int base) {
  const unsigned live = W.valid & ~W.exited;
  for (unsigned m = live; m; m &= m - 1)
    if (b->fibers[base + __builtin_ctz(m)].state == KK_RUN) return;  // a lane still runs
  for (unsigned m = W.am_wait; m; m &= m - 1) {
    const int l = __builtin_ctz(m);
    unsigned same = 0;
    for (unsigned k = W.am_wait; k; k &= k - 1)
      if (kk_same_site(W.am_site[__builtin_ctz(k)], W.am_site[l])) same |= k & -k;
    W.am_res[l] = same;
    b->fibers[base + l].state = KK_RUN;
  }
  W.am_wait = 0;
}
static inline void kk_blocked(kk_block* b, int me) {  // `me` has just stopped running
  kk_warp_slot& W = b->warps[me >> 5];
  if (__builtin_expect(W.am_wait != 0, 0)) kk_activemask_settle(b, W, me & ~31);
}

static inline void kk_bar_release(kk_block* b) {
  b->arrived = 0;
  for (int t = 0; t < b->n; ++t)
    if (b->fibers[t].state == KK_BAR) b->fibers[t].state = KK_RUN;
}

// Lanes of warps [first/32, (first+count)/32) that have not returned.
static inline int kk_live_in(const kk_block* b, int first, int count) {
  int live = 0;
  for (int w = first >> 5; w < (first + count + 31) >> 5; ++w)
    live += __builtin_popcount(b->warps[w].valid & ~b->warps[w].exited);
  return live;
}
static inline void kk_tile_release(kk_block* b, int first) {
  const int count = b->tile_size[first];
  for (int t = first; t < first + count && t < b->n; ++t)
    if (b->fibers[t].state == KK_TILE) b->fibers[t].state = KK_RUN;
  b->tile_arrived[first] = 0;
  --b->tiles_pending;
}

// Leaves fiber `me` (already marked waiting or done): switches straight to the next runnable
// fiber after it, or back to the scheduler at the end of a pass. Fibers run in index order, so
// the one KK_PREFETCH_AHEAD places on is likely next-but-one: its stack lines are prefetched
// (a pass over 256 fibers touches more stack lines than L1 holds; the misses were ~half the
// cost of a switch).
#ifndef KK_PREFETCH_AHEAD
#define KK_PREFETCH_AHEAD 2
#endif
static inline void kk_yield(kk_block* b, int me) {
  int j = me + 1;
  while (j < b->n && b->fibers[j].state != KK_RUN) ++j;
  if (j < b->n && !b->faulted) {
    b->cur = j;
    if (j + KK_PREFETCH_AHEAD < b->n) kk_ctx_prefetch(&b->fibers[j + KK_PREFETCH_AHEAD].ctx);
    *b->tid_slot = b->fibers[j].tid;
    kk_ctx_swap(&b->fibers[me].ctx, &b->fibers[j].ctx);
  } else {
    kk_ctx_swap(&b->fibers[me].ctx, &b->sched);
  }
}

static void kk_fiber_main() {
  kk_block* b = kk_cur_block;
  const int me = b->cur;
  try {
    b->L->run_thread(b->L->args, b->fibers[me].tid, b);
  } catch (kk_fault&) {
    b->faulted = true;
  } catch (...) {
    kk_fault_record("a C++ exception escaped the kernel in block (%u,%u,%u)", blockIdx.x,
                    blockIdx.y, blockIdx.z);
    b->faulted = true;
  }
  b->fibers[me].state = KK_DONE;
  ++b->done;
  kk_warp_slot& W = b->warps[me >> 5];
  W.exited |= 1u << (me & 31);  // exited lanes no longer take part in warp operations
  kk_warp_resolve_ready(b, W, me & ~31);
  // ... nor hold a barrier back (as on the GPU: bar.sync waits for non-exited threads only)
  if (b->arrived && b->arrived == b->n - b->done) kk_bar_release(b);
  if (b->tiles_pending)
    for (int f = 0; f < b->n; f += 32)
      if (b->tile_arrived[f] && b->tile_arrived[f] == kk_live_in(b, f, b->tile_size[f]))
        kk_tile_release(b, f);
  kk_blocked(b, me);
  kk_yield(b, me);
  __builtin_unreachable();
}

[[noreturn]] __attribute__((cold)) static void kk_deadlock(const kk_block& b) {
  int bar = 0, warp = 0;
  for (int t = 0; t < b.n; ++t) {
    bar += b.fibers[t].state == KK_BAR;
    warp += b.fibers[t].state == KK_WARP || b.fibers[t].state == KK_TILE;
  }
  if (bar)
    kk_fault_record(
        "divergent __syncthreads() at %s:%d in block (%u,%u,%u): %d of %d threads arrived, "
        "%d returned without reaching it, %d wait at a warp operation",
        b.bar_file, b.bar_line, blockIdx.x, blockIdx.y, blockIdx.z, bar, b.n, b.done, warp);
  else
    kk_fault_record(
        "warp operation deadlock in block (%u,%u,%u): %d of %d threads wait at a warp operation "
        "whose other lanes never arrive (%d returned)",
        blockIdx.x, blockIdx.y, blockIdx.z, warp, b.n, b.done);
  throw kk_fault{};
}

// A thread that used more stack than a fiber has wrote into the canary below it: a fault
// (the canary is restored, so the next launch starts clean).
static void kk_check_stacks(kk_worker& w, int n, const kk_launch& L) {
  const int t = w.overflowed(n);
  if (t < 0) return;
  for (int i = 0; i < n; ++i) memset(w.canary(i), KK_STACK_CANARY, KK_STACK_CANARY_BYTES);
  const uint3 tid = kk_tid_of(L.block, t);
  kk_fault_record(
      "thread (%u,%u,%u) of block (%u,%u,%u) overflowed its %d-byte fiber stack (large local "
      "arrays or deep recursion; compile with -DKK_CPU_FIBER_STACK_BYTES=... for more)",
      tid.x, tid.y, tid.z, blockIdx.x, blockIdx.y, blockIdx.z, (int)KK_CPU_FIBER_STACK_BYTES);
  throw kk_fault{};
}

// Releases the grid barrier when every block not finished has arrived (caller holds grid_mu).
static inline void kk_grid_release_if_ready(kk_launch& L) {
  if (L.grid_arrived && L.grid_arrived == L.grid_live) {
    L.grid_arrived = 0;
    ++L.grid_gen;
  }
}

static inline unsigned long long kk_block_index(const kk_launch& L, uint3 bid) {
  if (L.clustered) {  // the block's rank in its cluster
    const uint3 o = L.cluster_origin;
    return (bid.x - o.x) + L.cluster.x * ((bid.y - o.y) + L.cluster.y * (bid.z - o.z));
  }
  return bid.x + (unsigned long long)L.grid.x * (bid.y + (unsigned long long)L.grid.y * bid.z);
}

// Cooperative turns (caller holds grid_mu): the turn goes to the next unfinished block after
// `me`, in block order; then the caller waits until the turn is its own again (or a fault).
static void kk_coop_pass_locked(kk_launch& L, unsigned long long me) {
  unsigned long long next = L.nblocks;
  for (unsigned long long k = 1; k <= L.nblocks; ++k) {
    const unsigned long long c = (me + k) % L.nblocks;
    if (!L.ended[c]) {
      next = c;
      break;
    }
  }
  L.turn = next;
  if (next < L.nblocks) L.turn_cv[next].notify_one();  // one waiter: no herd of 100s of threads
}
static void kk_coop_wake_all(kk_launch& L) {  // a fault: every waiting block gives up
  for (unsigned long long i = 0; i < L.nblocks; ++i) L.turn_cv[i].notify_all();
}
static void kk_coop_wait_locked(kk_launch& L, std::unique_lock<std::mutex>& lk,
                                unsigned long long me) {
  L.turn_cv[me].wait(lk, [&] { return L.turn == me || L.faulted.load(); });
  if (L.turn != me) throw kk_fault{};  // another block faulted: this launch is over
}
static void kk_coop_wait_turn(kk_launch& L, unsigned long long me) {
  std::unique_lock<std::mutex> lk(L.grid_mu);
  kk_coop_wait_locked(L, lk, me);
}
static void kk_coop_next_turn(kk_launch& L, unsigned long long me) {  // at the end of a pass
  std::unique_lock<std::mutex> lk(L.grid_mu);
  kk_coop_pass_locked(L, me);
  kk_coop_wait_locked(L, lk, me);
}

static void kk_run_fibers(const kk_launch& L) {
  kk_worker& w = kk_this_worker();
  const int n = (int)(L.block.x * L.block.y * L.block.z), nw = (n + 31) / 32;
  w.reserve_fibers(n);
  kk_block b;
  b.fibers = w.fibers;
  b.warps = w.warps;
  b.tile_arrived = w.tile_counts;
  b.tile_size = w.tile_counts + n;
  b.tiles_pending = 0;
  b.n = n;
  b.done = b.arrived = b.cur = 0;
  b.faulted = false;
  b.bar_file = "?";
  b.bar_line = 0;
  b.L = &L;
  b.grid_syncs = 0;
  b.tid_slot = &threadIdx;
  for (int i = 0; i < nw; ++i) {
    memset(&w.warps[i], 0, offsetof(kk_warp_slot, src));
    w.warps[i].valid = (i == nw - 1 && (n & 31)) ? (1u << (n & 31)) - 1u : ~0u;
  }
  memset(w.tile_counts, 0, sizeof(unsigned short) * (size_t)n);  // a fault may leave arrivals
  for (int t = 0; t < n; ++t) {
    kk_ctx_make(&b.fibers[t].ctx, w.stack(t), KK_CPU_FIBER_STACK_BYTES, kk_fiber_main);
    b.fibers[t].state = KK_RUN;
    b.fibers[t].tid = kk_tid_of(L.block, t);
    b.fibers[t].grid_syncs = 0;
  }
  kk_cur_block = &b;
  kk_launch* const coop = L.cooperative ? kk_cur_launch : nullptr;
  const unsigned long long me = coop ? kk_block_index(L, blockIdx) : 0;
  if (coop) kk_coop_wait_turn(*coop, me);
  for (;;) {  // one pass: fibers hand over to each other in order, the last one comes back here
    int t = 0;
    while (t < n && b.fibers[t].state != KK_RUN) ++t;
    if (t == n && b.done < n && kk_warp_merge_stalled(&b)) continue;
    if (t == n) {
      kk_cur_block = nullptr;
      kk_check_stacks(w, n, L);
      if (b.done == n) return;
      kk_deadlock(b);
    }
    b.cur = t;
    for (int k = 1; k <= KK_PREFETCH_AHEAD && t + k < n; ++k) kk_ctx_prefetch(&b.fibers[t + k].ctx);
    threadIdx = b.fibers[t].tid;
    kk_ctx_swap(&b.sched, &b.fibers[t].ctx);
    if (b.faulted) {
      kk_cur_block = nullptr;
      kk_check_stacks(w, n, L);
      throw kk_fault{};
    }
    if (coop && b.done < n) kk_coop_next_turn(*coop, me);
  }
}

[[noreturn]] __attribute__((cold)) static void kk_no_fibers(const char* what) {
  kk_fault_record("%s called in a kernel compiled without fibers (kernelkit did not see it in "
                  "the source; call it directly from the body or header)", what);
  throw kk_fault{};
}

static inline kk_block* kk_fiber_block(const char* what) {
  kk_block* b = kk_cur_block;
  if (__builtin_expect(!b, 0)) kk_no_fibers(what);
  return b;
}

[[noreturn]] __attribute__((cold)) static void kk_barrier_sites(const kk_block& b, const char* file,
                                                                 int line) {
  kk_fault_record("divergent __syncthreads() in block (%u,%u,%u): %d thread(s) wait at %s:%d while "
                  "thread (%u,%u,%u) reaches %s:%d", blockIdx.x, blockIdx.y, blockIdx.z,
                  b.arrived, b.bar_file, b.bar_line, threadIdx.x, threadIdx.y, threadIdx.z, file,
                  line);
  throw kk_fault{};
}

// `b` is the running block: the kernel body passes its own parameter (no TLS lookup per barrier;
// see _source.py); helpers go through kk_syncthreads_at. Threads that have returned do not count
// (as on the GPU); threads waiting at another barrier's source line are a divergent barrier.
static inline void kk_syncthreads_in(kk_block* b, const char* file, int line) {
  if (b->arrived == 0) {
    b->bar_file = file;
    b->bar_line = line;
  } else if (__builtin_expect(line != b->bar_line || (file != b->bar_file &&
                                                      strcmp(file, b->bar_file) != 0), 0)) {
    kk_barrier_sites(*b, file, line);
  }
  if (++b->arrived == b->n - b->done) {  // last to arrive: release the others and keep running
    kk_bar_release(b);
    return;
  }
  const int me = b->cur;
  b->fibers[me].state = KK_BAR;
  kk_blocked(b, me);
  kk_yield(b, me);
}

static inline void kk_syncthreads_at(const char* file, int line) {
  kk_syncthreads_in(kk_fiber_block("__syncthreads"), file, line);
}

// Barrier of the `count` threads starting at `first` (a tile wider than a warp; warp-aligned).
static void kk_tile_sync(int first, int count) {
  kk_block* b = kk_fiber_block("thread_block_tile::sync");
  const int me = b->cur;
  if (b->tile_arrived[first] == 0) {
    b->tile_size[first] = (unsigned short)count;
    ++b->tiles_pending;
  }
  if (++b->tile_arrived[first] == kk_live_in(b, first, count)) {
    kk_tile_release(b, first);
    return;
  }
  b->fibers[me].state = KK_TILE;
  kk_blocked(b, me);
  kk_yield(b, me);
}

// cooperative_groups::grid_group::sync(): the block's threads meet at a block barrier; the first
// of them through it arrives at the grid barrier and passes the turn until every unfinished
// block has arrived (its other fibers, released, run after it).
static void kk_turns_barrier(kk_block* b, kk_launch& L, const char* file, int line);
static void kk_grid_sync(const char* file, int line) {
  kk_block* b = kk_fiber_block("grid_group::sync");
  kk_launch& L = *kk_cur_launch;
  if (!L.cooperative || L.clustered) {
    kk_fault_record("cooperative_groups::grid_group::sync() at %s:%d needs a cooperative launch "
                    "(kernel(..., cooperative=True)), which keeps every block resident", file, line);
    throw kk_fault{};
  }
  kk_turns_barrier(b, L, file, line);
}

// cluster_group::sync(): as grid_group::sync() over the blocks of the cluster (a launch of its
// own, see kk_run_clusters); a kernel without clusters is a cluster of one block.
static void kk_cluster_sync(const char* file, int line) {
  kk_block* b = kk_fiber_block("cluster_group::sync");
  kk_launch& L = *kk_cur_launch;
  if (!L.clustered) {
    kk_syncthreads_in(b, file, line);
    return;
  }
  kk_turns_barrier(b, L, file, line);
}

// A block of the caller's cluster by rank: a pointer into the caller's shared memory (static
// `__shared__` or the dynamic buffer) -> the same place in that block's.
static void* kk_cluster_map(const void* p, unsigned rank) {
  kk_launch* L = kk_cur_launch;
  const unsigned long long n = L && L->clustered ? (unsigned long long)L->cluster.x *
                                                       L->cluster.y * L->cluster.z : 1;
  if (rank >= n) {
    kk_fault_record("cluster_group::map_shared_rank: rank %u of a cluster of %llu block(s), in "
                    "block (%u,%u,%u)", rank, n, blockIdx.x, blockIdx.y, blockIdx.z);
    throw kk_fault{};
  }
  if (!L || !L->clustered) return (void*)p;
  // as on the GPU, another block's shared memory is there only once the cluster has met
  char* peer = L->cl_anchor[rank].load(std::memory_order_acquire);
  if (!peer || !kk_cur_block || kk_cur_block->grid_syncs == 0) {
    kk_fault_record("cluster_group::map_shared_rank(rank %u) in block (%u,%u,%u) before its first "
                    "cluster.sync(): the other block may not have started", rank, blockIdx.x,
                    blockIdx.y, blockIdx.z);
    throw kk_fault{};
  }
  const char* q = (const char*)p;
  const unsigned char* d = kk_dsmem;
  if (d && (const unsigned char*)q >= d && (const unsigned char*)q < d + L->shmem_bytes)
    return L->cl_dsmem[rank].load(std::memory_order_acquire) + ((const unsigned char*)q - d);
  return peer + (q - &kk_tls_anchor);
}

// The block barrier, then the block's first thread through it arrives at the launch-wide
// barrier and passes the turn until every unfinished block has arrived.
static void kk_turns_barrier(kk_block* b, kk_launch& L, const char* file, int line) {
  kk_syncthreads_in(b, file, line);
  if (++b->fibers[b->cur].grid_syncs <= b->grid_syncs) return;  // the block already waited
  ++b->grid_syncs;
  const unsigned long long me = kk_block_index(L, blockIdx);
  std::unique_lock<std::mutex> lk(L.grid_mu);
  const unsigned long long gen = L.grid_gen;
  ++L.grid_arrived;
  kk_grid_release_if_ready(L);
  while (L.grid_gen == gen) {
    kk_coop_pass_locked(L, me);
    kk_coop_wait_locked(L, lk, me);
  }
}

struct kk_xchg {
  unsigned long long value;
  unsigned ballot, group;
};

// Warp rendezvous: deposit (value, source lane, predicate); returns the source lane's value (or,
// for KK_XCHG_MATCH, the lanes holding the same value), the ballot of predicates and the set of
// lanes that took part.
static kk_xchg kk_warp_exchange(unsigned mask, unsigned long long v, int src, bool pred,
                                unsigned char op = KK_XCHG_SHFL) {
  kk_block* b = kk_fiber_block("a warp operation");
  const int me = b->cur, lane = me & 31;
  kk_warp_slot& W = b->warps[me >> 5];
  const unsigned bit = 1u << lane, key = (mask | bit) & W.valid;
  unsigned gi = 0;
  while (gi < W.ngroups && W.groups[gi].key != key) ++gi;  // nearly always 0 or 1 group
  kk_warp_group& g = W.groups[gi];
  if (gi == W.ngroups) {
    ++W.ngroups;
    g.key = key;
    g.arrived = g.pred = 0;
  }
  W.val[lane] = v;
  W.src[lane] = (unsigned char)(src & 31);
  g.op = op;
  if (pred) g.pred |= bit;
  g.arrived |= bit;
  if (kk_group_ready(g, W.exited)) {
    kk_warp_resolve(b, W, gi, me & ~31, me);
  } else {
    b->fibers[me].state = KK_WARP;
    kk_blocked(b, me);
    kk_yield(b, me);
  }
  return kk_xchg{W.res[lane], W.res_ballot[lane], W.res_group[lane]};
}

// The lanes of the caller's warp that are at the same call site now (see the model at the top).
__attribute__((noinline)) static unsigned kk_activemask(kk_site site) {
  kk_block* b = kk_cur_block;
  if (!b) return 0xffffffffu;  // (only fiber-mode kernels can diverge)
  const int me = b->cur, lane = me & 31;
  kk_warp_slot& W = b->warps[me >> 5];
  W.am_site[lane] = site;
  W.am_wait |= 1u << lane;
  b->fibers[me].state = KK_WARP;
  kk_activemask_settle(b, W, me & ~31);
  if (b->fibers[me].state != KK_RUN) kk_yield(b, me);
  return W.am_res[lane];
}

// --- the worker pool and the launch -----------------------------------------------------------
struct kk_helper {
  std::thread thread;
  bool done = false;  // returned (idle, or told to stop): join it
};

struct kk_pool {
  std::mutex mu, launch_mu;
  std::condition_variable work_cv, idle_cv;
  kk_launch* job = nullptr;
  int want = 0, joined = 0, running = 0, live = 0;
  bool stop = false;
  std::list<kk_helper> helpers;
};

static kk_pool* kk_pool_ptr;
static kk_pool& kk_the_pool() {
  static std::once_flag once;
  std::call_once(once, [] { kk_pool_ptr = new kk_pool(); });  // freed by kk_unload
  return *kk_pool_ptr;
}

static inline uint3 kk_block_of(const kk_launch& L, unsigned long long b) {
  if (L.clustered) {
    const uint3 o = L.cluster_origin;
    return uint3{o.x + (unsigned)(b % L.cluster.x), o.y + (unsigned)((b / L.cluster.x) % L.cluster.y),
                 o.z + (unsigned)(b / ((unsigned long long)L.cluster.x * L.cluster.y))};
  }
  return uint3{(unsigned)(b % L.grid.x), (unsigned)((b / L.grid.x) % L.grid.y),
               (unsigned)(b / ((unsigned long long)L.grid.x * L.grid.y))};
}

#include "kk_cpu_stop.h"  // SIGINT, time limits, faults: how a launch is left early

static void kk_work(kk_launch& L) {
  kk_cur_launch = &L;
  const int me = L.nworkers.fetch_add(1);
  sigjmp_buf jb;
  if (me < 256) {
    L.escape[me] = nullptr;
    L.workers[me].store(pthread_self());
  }
  if (sigsetjmp(jb, 0) == 0) {  // (the signal mask is restored by the handler's return path)
    if (me < 256) L.escape[me] = &jb;
    try {
      kk_worker& w = kk_this_worker();
      w.reserve_dsmem(L.shmem_bytes ? L.shmem_bytes : 1);
      kk_dsmem = w.dsmem;
      blockDim = L.block;
      gridDim = L.grid;
      while (!L.faulted.load(std::memory_order_relaxed) &&
             !L.stopped.load(std::memory_order_relaxed)) {
        const unsigned long long b0 = L.next.fetch_add(L.chunk, std::memory_order_relaxed);
        if (b0 >= L.nblocks) break;
        const unsigned long long b1 = b0 + L.chunk < L.nblocks ? b0 + L.chunk : L.nblocks;
        for (unsigned long long b = b0; b < b1; ++b) {
          blockIdx = kk_block_of(L, b);
          if (L.clustered) {  // where this block's shared memory is, for map_shared_rank
            L.cl_dsmem[b].store(kk_dsmem, std::memory_order_release);
            L.cl_anchor[b].store(&kk_tls_anchor, std::memory_order_release);
          }
          L.run_block(L, blockIdx);
          if (L.cooperative) {  // a finished block no longer holds the grid barrier back
            std::lock_guard<std::mutex> lk(L.grid_mu);
            const unsigned long long done = kk_block_index(L, blockIdx);
            L.ended[done] = 1;
            --L.grid_live;
            kk_grid_release_if_ready(L);
            if (L.turn == done) kk_coop_pass_locked(L, done);
          }
        }
      }
    } catch (kk_fault&) {
    } catch (std::exception& e) {
      kk_fault_record("C++ exception in the CPU runtime: %s", e.what());
    } catch (...) {
      kk_fault_record("unknown C++ exception in the CPU runtime");
    }
  } else {  // stopped or faulted inside a block: it is abandoned (see the model at the top)
    kk_cur_block = nullptr;
    sigset_t kick;
    sigemptyset(&kick);
    sigaddset(&kick, KK_KICK);
    sigaddset(&kick, SIGINT);
    sigaddset(&kick, SIGSEGV);
    sigaddset(&kick, SIGBUS);
    pthread_sigmask(SIG_UNBLOCK, &kick, nullptr);  // left blocked by the handler we jumped from
  }
  if (me < 256) L.escape[me] = nullptr;
  if (L.cooperative && (L.faulted.load() || L.stopped.load())) {  // wake blocks awaiting a turn
    std::lock_guard<std::mutex> lk(L.grid_mu);
    kk_coop_wake_all(L);
  }
  kk_cur_launch = nullptr;
}

// A cooperative launch: one OS thread per block (this one included), all live at once.
// `own_workers`: the threads free their worker state when done (a cluster launch starts
// threads for every cluster).
static void kk_run_cooperative(kk_launch& L, bool own_workers = false) {
  L.chunk = 1;
  L.grid_live = L.nblocks;
  L.ended.assign(L.nblocks, 0);
  L.turn_cv.reset(new std::condition_variable[L.nblocks]);
  std::vector<std::thread> threads;
  try {
    for (unsigned long long i = 1; i < L.nblocks; ++i) {
      if (own_workers) {
        threads.emplace_back([&L] {
          kk_work(L);
          kk_free_my_worker();
        });
      } else {
        threads.emplace_back(kk_work, std::ref(L));
      }
    }
  } catch (...) {  // could not start a thread: the blocks could never all be resident
    kk_cur_launch = &L;
    kk_fault_record("cooperative launch: could not start a thread for each of %llu blocks",
                    L.nblocks);
    kk_cur_launch = nullptr;
    std::lock_guard<std::mutex> lk(L.grid_mu);
    kk_coop_wake_all(L);
  }
  if (!L.faulted.load()) kk_work(L);
  for (std::thread& t : threads) t.join();
}

// A cluster launch (a kernel with cluster dims): one cluster after another, each run as a
// cooperative launch of its own blocks (an OS thread each, taking turns), so that
// cluster_group::sync() is that launch's barrier and every block of the cluster is live while
// another reads its shared memory. No parallelism across clusters. Returns as kk_launch_grid.
static int kk_run_clusters(const kk_launch& G, dim3 cl) {
  for (unsigned z = 0; z < G.grid.z; z += cl.z)
    for (unsigned y = 0; y < G.grid.y; y += cl.y)
      for (unsigned x = 0; x < G.grid.x; x += cl.x) {
        kk_launch C;
        C.args = G.args;
        C.run_block = G.run_block;
        C.run_thread = G.run_thread;
        C.grid = G.grid;
        C.block = G.block;
        C.nblocks = (unsigned long long)cl.x * cl.y * cl.z;
        C.shmem_bytes = G.shmem_bytes;
        C.message[0] = 0;
        C.cooperative = C.clustered = true;
        C.cluster = cl;
        C.cluster_origin = uint3{x, y, z};
        for (int i = 0; i < KK_CPU_MAX_CLUSTER_BLOCKS; ++i) {
          C.cl_anchor[i].store(nullptr);
          C.cl_dsmem[i].store(nullptr);
        }
        kk_run_cooperative(C, true);
        if (C.faulted.load()) {
          memcpy(kk_last_fault, C.message, sizeof(kk_last_fault));
          return 1;
        }
      }
  return 0;
}

static void kk_helper_main(kk_pool* p, kk_helper* self) {
  std::unique_lock<std::mutex> lk(p->mu);
  while (!p->stop) {
    if (p->job && p->joined < p->want) {
      kk_launch* job = p->job;
      ++p->joined;
      ++p->running;
      lk.unlock();
      kk_work(*job);
      lk.lock();
      if (--p->running == 0) p->idle_cv.notify_all();
      continue;
    }
    if (!p->work_cv.wait_for(lk, std::chrono::seconds(KK_CPU_IDLE_SECONDS),
                             [p] { return p->stop || (p->job && p->joined < p->want); }))
      break;
  }
  --p->live;
  self->done = true;  // the next launch (or kk_unload) joins this thread
  lk.unlock();
  kk_free_my_worker();
}

// Starts helpers up to `n` live ones (joining those that have returned); under p.mu.
static void kk_start_helpers(kk_pool& p, int n) {
  for (auto it = p.helpers.begin(); it != p.helpers.end();) {
    if (it->done) {
      it->thread.join();
      it = p.helpers.erase(it);
    } else {
      ++it;
    }
  }
  try {
    while (p.live < n) {
      p.helpers.emplace_back();
      kk_helper& h = p.helpers.back();
      try {
        h.thread = std::thread(kk_helper_main, &p, &h);
      } catch (...) {
        p.helpers.pop_back();
        throw;
      }
      ++p.live;
    }
  } catch (...) {  // could not start a thread: run with the helpers we have
  }
}

// The time limit's watchdog: stops the launch and kicks its workers at the deadline.
struct kk_watchdog {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread thread;
  void start(kk_launch* L, long long limit_ns) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(limit_ns);
    thread = std::thread([this, L, until] {
      std::unique_lock<std::mutex> lk(mu);
      if (cv.wait_until(lk, until, [this] { return done; })) return;
      int was = 0;
      if (L->stopped.compare_exchange_strong(was, 2)) kk_kick(L);
    });
  }
  void finish() {
    if (!thread.joinable()) return;
    {
      std::lock_guard<std::mutex> lk(mu);
      done = true;
    }
    cv.notify_all();
    thread.join();
  }
};

// Runs a whole grid; returns 0, or 1 with the fault message in kk_last_fault (this thread's),
// 2 for a launch CUDA would refuse, 3 when SIGINT stopped it, 4 when its time limit did.
static int kk_launch_grid(const void* args, kk_block_fn rb, kk_thread_fn rt, long long gx,
                          long long gy, long long gz, long long bx, long long by, long long bz,
                          long long shmem, int nthreads, bool cooperative = false,
                          long long cx = 1, long long cy = 1, long long cz = 1) {
  kk_launch L;
  L.args = args;
  L.run_block = rb;
  L.run_thread = rt;
  L.grid = dim3((unsigned)gx, (unsigned)gy, (unsigned)gz);
  L.block = dim3((unsigned)bx, (unsigned)by, (unsigned)bz);
  L.nblocks = (unsigned long long)gx * gy * gz;
  L.shmem_bytes = (size_t)shmem;
  L.message[0] = 0;
  const long long limit_ns = kk_next_limit_ns;
  kk_next_limit_ns = 0;
  const long long threads = bx * by * bz;
  // CUDA's limits (compute capability 7.0 and later), so what runs here launches on a GPU.
  if (gx < 1 || gy < 1 || gz < 1 || gx > 2147483647LL || gy > 65535 || gz > 65535 || bx < 1 ||
      by < 1 || bz < 1 || bx > 1024 || by > 1024 || bz > 64 || threads > 1024 || shmem < 0 ||
      shmem > KK_CPU_MAX_DYNAMIC_SHARED_BYTES) {
    snprintf(kk_last_fault, sizeof(kk_last_fault),
             "cpu: invalid launch: grid (%lld,%lld,%lld) (at most (2^31-1,65535,65535)), block "
             "(%lld,%lld,%lld) (at most (1024,1024,64) and 1024 threads), %lld bytes of dynamic "
             "shared memory (at most %d)", gx, gy, gz, bx, by, bz, shmem,
             KK_CPU_MAX_DYNAMIC_SHARED_BYTES);
    return 2;
  }
  if (cooperative && L.nblocks > KK_CPU_MAX_COOPERATIVE_BLOCKS) {
    snprintf(kk_last_fault, sizeof(kk_last_fault),
             "cpu: cooperative launch of %llu blocks: the CPU backend keeps at most %d blocks "
             "resident at once (an OS thread each); launch fewer blocks, as a GPU also fits only "
             "so many", L.nblocks, KK_CPU_MAX_COOPERATIVE_BLOCKS);
    return 2;
  }
  const long long ncl = cx * cy * cz;
  if (ncl > 1 && (cooperative || ncl > KK_CPU_MAX_CLUSTER_BLOCKS || gx % cx || gy % cy ||
                  gz % cz || limit_ns > 0)) {
    snprintf(kk_last_fault, sizeof(kk_last_fault),
             "cpu: invalid cluster launch: clusters of (%lld,%lld,%lld) blocks (at most %d) must "
             "divide the grid (%lld,%lld,%lld), and the CPU backend runs them neither "
             "cooperatively nor with timeout=", cx, cy, cz, KK_CPU_MAX_CLUSTER_BLOCKS, gx, gy, gz);
    return 2;
  }
  if (ncl > 1) {  // not routed through kk_signals_on: Ctrl-C waits for the launch to end
    std::lock_guard<std::mutex> serial(kk_the_pool().launch_mu);
    const int rc = kk_run_clusters(L, dim3((unsigned)cx, (unsigned)cy, (unsigned)cz));
    fflush(stdout);
    return rc;
  }
  L.cooperative = cooperative;
  if (cooperative && limit_ns > 0) {
    snprintf(kk_last_fault, sizeof(kk_last_fault),
             "cpu: timeout= is not supported for cooperative launches (their blocks take turns "
             "on OS threads of their own, which the time limit does not reach)");
    return 2;
  }
  if (cooperative) {  // not routed through kk_signals_on: Ctrl-C waits for the launch to end
    std::lock_guard<std::mutex> serial(kk_the_pool().launch_mu);
    kk_run_cooperative(L);
    fflush(stdout);
    if (!L.faulted.load()) return 0;
    memcpy(kk_last_fault, L.message, sizeof(kk_last_fault));
    return 1;
  }
  if (nthreads < 1) nthreads = 1;
  const unsigned long long per = L.nblocks / ((unsigned long long)nthreads * 16);
  L.chunk = per ? per : 1;
  const int helpers = (int)(L.nblocks - 1 < (unsigned long long)(nthreads - 1) ? L.nblocks - 1
                                                                               : nthreads - 1);
  for (int i = 0; i <= helpers && i < 256; ++i) L.workers[i].store(0);  // 0: not stored yet
  kk_pool& p = kk_the_pool();
  std::lock_guard<std::mutex> serial(p.launch_mu);
  kk_active = &L;
  const bool signals = kk_signals_on(limit_ns > 0);
  kk_watchdog dog;
  if (limit_ns > 0) dog.start(&L, limit_ns);
  if (helpers > 0) {
    std::lock_guard<std::mutex> lk(p.mu);
    kk_start_helpers(p, helpers);
    p.job = &L;
    p.joined = 0;
    p.want = helpers;
    p.work_cv.notify_all();
  }
  kk_work(L);
  if (helpers > 0) {
    std::unique_lock<std::mutex> lk(p.mu);
    p.job = nullptr;
    p.idle_cv.wait(lk, [&p] { return p.running == 0; });
  }
  dog.finish();
  kk_signals_off(signals);
  kk_active = nullptr;
  fflush(stdout);
  if (const int why = L.stopped.load()) {
    if (why == 1)
      snprintf(kk_last_fault, sizeof(kk_last_fault), "interrupted (SIGINT); the outputs are "
               "incomplete");
    else
      snprintf(kk_last_fault, sizeof(kk_last_fault), "stopped by its time limit of %.3f s; the "
               "outputs are incomplete", (double)limit_ns * 1e-9);
    return why == 1 ? 3 : 4;
  }
  if (!L.faulted.load()) return 0;
  memcpy(kk_last_fault, L.message, sizeof(kk_last_fault));
  return 1;
}

// A time limit for this thread's next launch of this library (0: none).
extern "C" __attribute__((visibility("default"))) void kk_set_time_limit(long long ns) {
  kk_next_limit_ns = ns;
}

// Stops and joins the helpers and frees every worker's memory, so the library can be dlclosed;
// called once, when nothing can launch this library any more.
extern "C" __attribute__((visibility("default"))) void kk_unload() {
  if (kk_pool* p = kk_pool_ptr) {
    {
      std::lock_guard<std::mutex> lk(p->mu);
      p->stop = true;
    }
    p->work_cv.notify_all();
    for (kk_helper& h : p->helpers)
      if (h.thread.joinable()) h.thread.join();
    delete p;
    kk_pool_ptr = nullptr;
  }
  std::lock_guard<std::mutex> lk(kk_workers_mu);
  if (kk_workers) {
    for (kk_worker* w : *kk_workers) delete w;
    delete kk_workers;
    kk_workers = nullptr;
  }
  kk_my_worker = nullptr;
}
