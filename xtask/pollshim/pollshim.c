/*
 * pollshim: a preload library for `cargo xtask bench cost`. It makes a process measured under
 * callgrind behave as if its device were never slower than it is, so that its instructions
 * per operation are its work and not its waits.
 *
 * Under callgrind the measured process is slowed some fifty times while rxe and the peer run
 * at the guest's speed, so a poll finds the completion queue empty, or holding less than a
 * saturated device would have queued, for a share of the run that depends on timing; every
 * empty poll and every short batch is counted. This library replaces each context's
 * `poll_cq` (as `ibv_open_device` returns it) by one that, with callgrind's collection off,
 * waits until the queue holds as many completions as asked for, or some and no new one for
 * POLLSHIM_QUIET_US (2000), or none for POLLSHIM_EMPTY_US (20000), and never longer than 1 s;
 * then, collection on again, it makes the provider's poll, which is counted as usual. Whether the queue holds anything
 * is read from rxe's queue indices without taking anything from it.
 *
 * Threads whose name (prctl PR_GET_NAME) starts with one of the comma-separated prefixes in
 * POLLSHIM_PASS poll as they would; the others wait. (Under valgrind a thread nobody named
 * carries the tool's name, not the program's.) At exit it writes to the file
 * POLLSHIM_OUT (if set) one line: `polls waits empty_waits partial_waits entries`.
 *
 * It also puts `gettimeofday` on a virtual clock that starts at the real time and advances
 * 10 us per call: perftest measures the CPU's clock rate at start-up by reading the time
 * until a set interval has passed, a number of reads (and instructions) that depends on how
 * fast the process runs. The programs measured read it otherwise only to print their timings.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/time.h>
#include <time.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_user_rxe.h>
#include <valgrind/callgrind.h>

typedef int (*poll_cq_fn)(struct ibv_cq *, int, struct ibv_wc *);

/* rdma-core's `struct rxe_cq` (providers/rxe/rxe.h), as far as the queue pointer. */
struct rxe_cq_head {
	union {
		struct ibv_cq cq;
		struct ibv_cq_ex cq_ex;
	} vcq;
	struct mminfo mmap_info;
	struct rxe_queue_buf *queue;
};

static poll_cq_fn provider_poll;
static long quiet_ns = 2000 * 1000L, empty_ns = 20000 * 1000L;
/* No wait lasts longer than this, whatever comes. */
static const long longest_ns = 1000L * 1000 * 1000;
static const char *passing;
static atomic_ulong polls, waits, empty_waits, partial_waits, entries;
static __thread int thread_state; /* 0 unknown, 1 waits, 2 passes through */

static void die(const char *what)
{
	fprintf(stderr, "pollshim: %s\n", what);
	abort();
}

static long now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000L + t.tv_nsec;
}

/* Completions queued in `cq` and not yet polled. */
static uint32_t queued(struct ibv_cq *cq)
{
	struct rxe_queue_buf *q = ((struct rxe_cq_head *)cq)->queue;
	uint32_t prod = atomic_load_explicit((_Atomic uint32_t *)&q->producer_index,
					     memory_order_acquire);
	uint32_t cons = atomic_load_explicit((_Atomic uint32_t *)&q->consumer_index,
					     memory_order_relaxed);
	uint32_t mask = q->index_mask;
	if (prod > mask || cons > mask || ((mask + 1) & mask) != 0 || mask < (uint32_t)cq->cqe)
		die("the completion queue is not laid out as rxe's (rdma-core 44)");
	return (prod - cons) & mask;
}

static int waits_here(void)
{
	if (thread_state == 0) {
		char name[17] = {0};
		prctl(PR_GET_NAME, name, 0, 0, 0);
		thread_state = 1;
		const char *p = passing ? passing : "";
		while (*p) {
			const char *end = strchrnul(p, ',');
			if (end > p && strncmp(p, name, end - p) == 0)
				thread_state = 2;
			p = *end ? end + 1 : end;
		}
	}
	return thread_state == 1;
}

/* Uncounted: waits as the header says. */
static void settle(struct ibv_cq *cq, int ne)
{
	uint32_t have = queued(cq);
	atomic_fetch_add(&polls, 1);
	if (have >= (uint32_t)ne) {
		atomic_fetch_add(&entries, ne);
		return;
	}
	atomic_fetch_add(&waits, 1);
	long start = now_ns(), last = start;
	struct timespec pause = {0, 20 * 1000};
	for (;;) {
		nanosleep(&pause, NULL);
		uint32_t now_have = queued(cq);
		long t = now_ns();
		if (now_have != have) {
			have = now_have;
			last = t;
		}
		if (have >= (uint32_t)ne)
			break;
		if (have > 0 && t - last >= quiet_ns) {
			atomic_fetch_add(&partial_waits, 1);
			break;
		}
		if (have == 0 && t - start >= empty_ns) {
			atomic_fetch_add(&empty_waits, 1);
			break;
		}
		/* A bound on any wait, should completions trickle in forever (or another thread
		 * take them as they come). */
		if (t - start >= longest_ns) {
			atomic_fetch_add(&partial_waits, 1);
			break;
		}
	}
	atomic_fetch_add(&entries, have < (uint32_t)ne ? have : (uint32_t)ne);
}

static int shim_poll_cq(struct ibv_cq *cq, int ne, struct ibv_wc *wc)
{
	if (ne > 0 && waits_here()) {
		CALLGRIND_TOGGLE_COLLECT;
		settle(cq, ne);
		CALLGRIND_TOGGLE_COLLECT;
	}
	return provider_poll(cq, ne, wc);
}

static long env_us(const char *name, long dflt)
{
	const char *v = getenv(name);
	return v ? atol(v) * 1000L : dflt;
}

struct ibv_context *shim_open_device(struct ibv_device *device)
{
	static struct ibv_context *(*real)(struct ibv_device *);
	if (!real) {
		real = dlvsym(RTLD_NEXT, "ibv_open_device", "IBVERBS_1.1");
		if (!real)
			die("no ibv_open_device@IBVERBS_1.1 to wrap");
		quiet_ns = env_us("POLLSHIM_QUIET_US", quiet_ns);
		empty_ns = env_us("POLLSHIM_EMPTY_US", empty_ns);
		passing = getenv("POLLSHIM_PASS");
	}
	struct ibv_context *ctx = real(device);
	if (!ctx)
		return ctx;
	if (strncmp(ibv_get_device_name(device), "rxe", 3) != 0)
		die("only rxe devices are supported");
	if (provider_poll && provider_poll != ctx->ops.poll_cq)
		die("two providers' poll_cq in one process");
	provider_poll = ctx->ops.poll_cq;
	ctx->ops.poll_cq = shim_poll_cq;
	return ctx;
}
__asm__(".symver shim_open_device, ibv_open_device@@IBVERBS_1.1");

int shim_gettimeofday(struct timeval *tv, void *tz)
{
	static _Atomic long virtual_us;
	long us = atomic_load(&virtual_us);
	if (us == 0) {
		struct timespec t;
		clock_gettime(CLOCK_REALTIME, &t);
		long start = t.tv_sec * 1000000L + t.tv_nsec / 1000;
		atomic_compare_exchange_strong(&virtual_us, &us, start);
	}
	us = atomic_fetch_add(&virtual_us, 10);
	(void)tz;
	if (tv) {
		tv->tv_sec = us / 1000000L;
		tv->tv_usec = us % 1000000L;
	}
	return 0;
}
__asm__(".symver shim_gettimeofday, gettimeofday@@GLIBC_2.2.5");

__attribute__((destructor)) static void report(void)
{
	const char *out = getenv("POLLSHIM_OUT");
	FILE *f = out ? fopen(out, "w") : NULL;
	if (!f)
		return;
	fprintf(f, "%lu %lu %lu %lu %lu\n", atomic_load(&polls), atomic_load(&waits),
		atomic_load(&empty_waits), atomic_load(&partial_waits), atomic_load(&entries));
	fclose(f);
}
