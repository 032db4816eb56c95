// SPDX-License-Identifier: GPL-2.0
/*
 * fleet-probe: the workload side of tests/bench/fleet-guest.sh (static, so
 * it runs in the busybox guest).
 *
 *   fleet-probe spawn THREAD_EVERY < PATHS
 *       one sleeping process per line of PATHS (a cgroup directory), moved
 *       into it; every THREAD_EVERY-th one has two extra threads. Prints
 *       how many it started; they outlive it.
 *   fleet-probe churn DIR PERIOD_MS LIVE
 *       a container runtime's churn until SIGTERM: every PERIOD_MS, mkdir
 *       DIR/cN, start a process and move it in; once LIVE are up, move the
 *       oldest one's process back to DIR/driver, kill it, rmdir its cgroup.
 *       Prints the cycles done and the slowest one (ms) on SIGTERM.
 *   fleet-probe probe DIR PERIOD_MS SECS [STALLS [WATCH]]
 *       a container start's cgroup work every PERIOD_MS for SECS: mkdir
 *       DIR/pN, move a process in (its pid to cgroup.procs), move it back to
 *       DIR/home, rmdir DIR/pN. Run it from DIR/home. Prints latency
 *       percentiles per cycle and per operation (ms). With STALLS: when an
 *       operation has taken STALL_MS, appends to STALLS where it waits in
 *       the kernel (its /proc stack), every task in D or R state and every
 *       thread of cgroup WATCH (the recorder's), with their stacks and
 *       current syscalls: what the operation waits for and who holds it (a
 *       runnable task not on a CPU shows its stack; one on a CPU, its
 *       syscall).
 *   fleet-probe work DIR NWORKERS SECS
 *       NWORKERS processes, each in its own DIR/wN, each looping over a
 *       fixed CPU + memory unit. Prints units per second (all workers).
 *   fleet-probe samples STORE_DIR
 *       samples in a below store (index entries with a data length).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what, const char *arg)
{
	fprintf(stderr, "fleet-probe: %s %s: %s\n", what, arg ? arg : "",
		strerror(errno));
	exit(1);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Writes PID to DIR/cgroup.procs: a migration, under cgroup_mutex. */
static void move_to(const char *dir, pid_t pid)
{
	char path[4096], buf[32];
	int fd, n;

	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	fd = open(path, O_WRONLY);
	if (fd < 0)
		die("open", path);
	n = snprintf(buf, sizeof(buf), "%d", pid);
	if (write(fd, buf, n) != n)
		die("write", path);
	close(fd);
}

static void *block_forever(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

/* A child that only sleeps; NTHREADS extra threads sleep with it. */
static pid_t sleeper(int nthreads, const char *name)
{
	pid_t pid = fork();

	if (pid < 0)
		die("fork", NULL);
	if (pid > 0)
		return pid;
	prctl(PR_SET_NAME, name);
	signal(SIGTERM, SIG_DFL);
	/* Off the caller's pipes: a shell reading our output waits for EOF. */
	int null = open("/dev/null", O_RDWR);
	if (null >= 0) {
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
	}
	for (int i = 0; i < nthreads; i++) {
		pthread_t t;
		pthread_attr_t a;

		/* Small stacks: thousands of sleepers fit in a guest. */
		pthread_attr_init(&a);
		pthread_attr_setstacksize(&a, 64 << 10);
		if (pthread_create(&t, &a, block_forever, NULL))
			_exit(1);
	}
	block_forever(NULL);
	_exit(0);
}

static int spawn(int thread_every)
{
	char line[4096];
	int n = 0;

	while (fgets(line, sizeof(line), stdin)) {
		line[strcspn(line, "\n")] = 0;
		if (!*line)
			continue;
		int threads = thread_every > 0 && n % thread_every == 0 ? 2 : 0;
		move_to(line, sleeper(threads, threads ? "fleet-daemon" : "fleet-sleeper"));
		n++;
	}
	printf("%d\n", n);
	return 0;
}

static volatile sig_atomic_t stop;
static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static void sleep_until(double deadline_ms)
{
	long long ns = (long long)(deadline_ms * 1e6);
	struct timespec ts = { .tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000 };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR && !stop)
		;
}

/* The next tick after now: ticks missed while a cycle was late are skipped. */
static double next_tick(double tick, double period)
{
	double t = now_ms();

	tick += period;
	if (tick < t)
		tick += period * (double)(long)((t - tick) / period + 1);
	return tick;
}

static int churn(const char *dir, int period, int live)
{
	char driver[4096], path[4096];
	pid_t *pids = calloc(live, sizeof(*pids));
	long *ids = calloc(live, sizeof(*ids));
	long cycles = 0, next = 0;
	double worst = 0, tick;

	if (!pids || !ids)
		die("calloc", NULL);
	signal(SIGTERM, on_term);
	snprintf(driver, sizeof(driver), "%s/driver", dir);
	tick = now_ms();
	while (!stop) {
		double t0 = now_ms();
		int slot = next % live;

		if (pids[slot]) {
			/* Leave, stop, remove: a container going away. */
			move_to(driver, pids[slot]);
			kill(pids[slot], SIGKILL);
			waitpid(pids[slot], NULL, 0);
			snprintf(path, sizeof(path), "%s/c%ld", dir, ids[slot]);
			if (rmdir(path))
				die("rmdir", path);
		}
		snprintf(path, sizeof(path), "%s/c%ld", dir, next);
		if (mkdir(path, 0755))
			die("mkdir", path);
		pids[slot] = sleeper(0, "fleet-ctr");
		move_to(path, pids[slot]);
		ids[slot] = next++;
		cycles++;
		if (now_ms() - t0 > worst)
			worst = now_ms() - t0;
		tick = next_tick(tick, period);
		sleep_until(tick);
	}
	for (int i = 0; i < live; i++) {
		if (!pids[i])
			continue;
		kill(pids[i], SIGKILL);
		waitpid(pids[i], NULL, 0);
		snprintf(path, sizeof(path), "%s/c%ld", dir, ids[i]);
		rmdir(path);
	}
	printf("churn_cycles=%ld churn_max_ms=%.2f\n", cycles, worst);
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile of V[0..N) (sorted in place). */
static double pct(double *v, long n, double p)
{
	long i;

	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), cmp_double);
	i = (long)(p / 100 * n + 0.999999) - 1;
	if (i < 0)
		i = 0;
	if (i >= n)
		i = n - 1;
	return v[i];
}

/* The operation in progress, for the stall watchdog: its start (ms, 0
 * when none) and its number. */
#define STALL_MS 150
#define MAX_STALLS 12
static volatile double op_start;
static volatile long op_seq;
static const char *stall_path, *watch_cgroup;
static pid_t prober_tid;

/* Appends /proc/PID/task/TID's comm, state and kernel stack to F. */
static void dump_task(FILE *f, const char *pid, const char *tid)
{
	char path[600], buf[8192];
	size_t n;
	FILE *in;

	snprintf(path, sizeof(path), "/proc/%s/task/%s/stat", pid, tid);
	if (!(in = fopen(path, "r")))
		return;
	n = fread(buf, 1, sizeof(buf) - 1, in);
	fclose(in);
	buf[n] = 0;
	buf[strcspn(buf, "\n")] = 0;
	/* pid (comm) state ...: up to the state. */
	char *close_paren = strrchr(buf, ')');
	if (close_paren && close_paren[1] && close_paren[2])
		close_paren[3] = 0;
	fprintf(f, "  task %s: %s\n", tid, buf);
	snprintf(path, sizeof(path), "/proc/%s/task/%s/syscall", pid, tid);
	if ((in = fopen(path, "r"))) {
		if (fgets(buf, sizeof(buf), in))
			fprintf(f, "    syscall: %s", buf);
		fclose(in);
	}
	snprintf(path, sizeof(path), "/proc/%s/task/%s/stack", pid, tid);
	if (!(in = fopen(path, "r")))
		return;
	while (fgets(buf, sizeof(buf), in))
		fprintf(f, "    %s", buf);
	fclose(in);
}

/* The state letter of /proc/PID/task/TID/stat, or 0. */
static char task_state(const char *pid, const char *tid)
{
	char path[600], buf[1024];
	size_t n;
	FILE *in;

	snprintf(path, sizeof(path), "/proc/%s/task/%s/stat", pid, tid);
	if (!(in = fopen(path, "r")))
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, in);
	fclose(in);
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p[2] : 0;
}

static int is_number(const char *s)
{
	return *s && strspn(s, "0123456789") == strlen(s);
}

static void dump_stall(long seq, double waited)
{
	FILE *f = fopen(stall_path, "a");
	char self[32], path[4096], line[64];
	DIR *procs, *tasks;
	struct dirent *p, *t;
	FILE *in;

	if (!f)
		return;
	fprintf(f, "stall: operation %ld (%s) waiting %.0f ms\n", seq,
		(const char *[]){ "mkdir", "attach", "detach", "rmdir" }[seq % 4], waited);
	snprintf(self, sizeof(self), "%d", prober_tid);
	fprintf(f, " prober:\n");
	dump_task(f, self, self);
	if (watch_cgroup) {
		fprintf(f, " watched cgroup %s:\n", watch_cgroup);
		snprintf(path, sizeof(path), "%s/cgroup.threads", watch_cgroup);
		if ((in = fopen(path, "r"))) {
			while (fgets(line, sizeof(line), in)) {
				line[strcspn(line, "\n")] = 0;
				/* A thread's /proc entry is reachable as /proc/TID. */
				dump_task(f, line, line);
			}
			fclose(in);
		}
	}
	fprintf(f, " in D or R state:\n");
	if ((procs = opendir("/proc"))) {
		while ((p = readdir(procs))) {
			if (!is_number(p->d_name))
				continue;
			snprintf(path, sizeof(path), "/proc/%s/task", p->d_name);
			if (!(tasks = opendir(path)))
				continue;
			while ((t = readdir(tasks))) {
				char st = is_number(t->d_name) && strcmp(t->d_name, self) ?
						  task_state(p->d_name, t->d_name) : 0;

				if (st == 'D' || st == 'R')
					dump_task(f, p->d_name, t->d_name);
			}
			closedir(tasks);
		}
		closedir(procs);
	}
	fclose(f);
}

/* Reports each operation that takes STALL_MS, once, up to MAX_STALLS. */
static void *stall_watch(void *arg)
{
	long reported = -1, stalls = 0;

	(void)arg;
	while (stalls < MAX_STALLS) {
		usleep(20 * 1000);
		double start = op_start;
		long seq = op_seq;

		if (start > 0 && seq != reported && now_ms() - start >= STALL_MS) {
			dump_stall(seq, now_ms() - start);
			reported = seq;
			stalls++;
		}
	}
	return NULL;
}

/* Marks operation K of cycle N as started (T: now). */
static void op_begin(long n, int k, double t)
{
	op_seq = n * 4 + k;
	op_start = t;
}

static int probe(const char *dir, int period, int secs)
{
	static const char *ops[] = { "mkdir", "attach", "detach", "rmdir" };
	long cap = (long)secs * 1000 / period + 2, n = 0, missed = 0;
	double *cyc = calloc(cap, sizeof(double)), *op[4], tick, end;
	char home[4096], path[4096];
	pid_t child;

	for (int k = 0; k < 4; k++)
		if (!(op[k] = calloc(cap, sizeof(double))))
			die("calloc", NULL);
	if (!cyc)
		die("calloc", NULL);
	snprintf(home, sizeof(home), "%s/home", dir);
	child = sleeper(0, "fleet-ctr-init");
	if (stall_path) {
		pthread_t w;

		prober_tid = gettid();
		if (pthread_create(&w, NULL, stall_watch, NULL))
			die("pthread_create", NULL);
	}
	tick = now_ms();
	end = tick + secs * 1e3;
	while (n < cap && now_ms() < end) {
		double t[5];

		snprintf(path, sizeof(path), "%s/p%ld", dir, n);
		t[0] = now_ms();
		op_begin(n, 0, t[0]);
		if (mkdir(path, 0755))
			die("mkdir", path);
		t[1] = now_ms();
		op_begin(n, 1, t[1]);
		move_to(path, child);
		t[2] = now_ms();
		op_begin(n, 2, t[2]);
		move_to(home, child);
		t[3] = now_ms();
		op_begin(n, 3, t[3]);
		if (rmdir(path))
			die("rmdir", path);
		t[4] = now_ms();
		op_start = 0;
		cyc[n] = t[4] - t[0];
		for (int k = 0; k < 4; k++)
			op[k][n] = t[k + 1] - t[k];
		n++;
		double want = tick + period;
		tick = next_tick(tick, period);
		missed += (long)((tick - want) / period + 0.5);
		sleep_until(tick);
	}
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	/* Whole cycles first: pct sorts its array. */
	printf("cycles=%ld missed_ticks=%ld p50_ms=%.3f p99_ms=%.3f max_ms=%.3f",
	       n, missed, pct(cyc, n, 50), pct(cyc, n, 99), pct(cyc, n, 100));
	for (int k = 0; k < 4; k++)
		printf(" %s_p99_ms=%.3f %s_max_ms=%.3f", ops[k], pct(op[k], n, 99),
		       ops[k], pct(op[k], n, 100));
	printf("\n");
	return 0;
}

/* One unit of work: arithmetic over 64 KiB of the worker's 4 MiB. */
#define WORK_MEM (4 << 20)
#define WORK_STEP (64 << 10)
static uint64_t unit(unsigned char *mem, long i)
{
	size_t off = (size_t)(i % (WORK_MEM / WORK_STEP)) * WORK_STEP;
	uint64_t h = (uint64_t)i * 0x9e3779b97f4a7c15ull;

	for (size_t j = 0; j < WORK_STEP; j += 64) {
		h ^= mem[off + j] + j;
		h *= 0x100000001b3ull;
		mem[off + j] = (unsigned char)h;
	}
	return h;
}

static int work(const char *dir, int nworkers, int secs)
{
	/* Counters the workers bump and the parent reads: shared memory. */
	volatile long *done = mmap(NULL, sizeof(long) * nworkers, PROT_READ | PROT_WRITE,
				   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t *pids = calloc(nworkers, sizeof(*pids));
	char path[4096];
	long before = 0, after = 0;
	double t0, t1;

	if (done == MAP_FAILED || !pids)
		die("mmap", NULL);
	for (int w = 0; w < nworkers; w++) {
		snprintf(path, sizeof(path), "%s/w%d", dir, w);
		if (mkdir(path, 0755) && errno != EEXIST)
			die("mkdir", path);
		pids[w] = fork();
		if (pids[w] < 0)
			die("fork", NULL);
		if (pids[w] == 0) {
			unsigned char *mem = malloc(WORK_MEM);
			volatile uint64_t sink = 0;

			if (!mem)
				_exit(1);
			memset(mem, 1, WORK_MEM);
			for (long i = 0;; i++) {
				sink += unit(mem, i);
				done[w] = i + 1;
			}
		}
		move_to(path, pids[w]);
	}
	/* Counted from a common start: the workers' own start-up is not work. */
	usleep(500 * 1000);
	t0 = now_ms();
	for (int w = 0; w < nworkers; w++)
		before += done[w];
	sleep_until(t0 + secs * 1e3);
	for (int w = 0; w < nworkers; w++)
		after += done[w];
	t1 = now_ms();
	for (int w = 0; w < nworkers; w++) {
		kill(pids[w], SIGKILL);
		waitpid(pids[w], NULL, 0);
		snprintf(path, sizeof(path), "%s/w%d", dir, w);
		rmdir(path);
	}
	printf("ops_s=%.1f\n", (after - before) / ((t1 - t0) / 1e3));
	return 0;
}

/* below's index entries are 32 bytes; bytes 16..20 (the data length) are
 * zero in an entry that was never written. */
static int samples(const char *store)
{
	DIR *d = opendir(store);
	struct dirent *e;
	long n = 0;

	if (!d) {
		printf("0\n");
		return 0;
	}
	while ((e = readdir(d))) {
		char path[4096];
		unsigned char ent[32];
		FILE *f;

		if (strncmp(e->d_name, "index_", 6))
			continue;
		snprintf(path, sizeof(path), "%s/%s", store, e->d_name);
		if (!(f = fopen(path, "rb")))
			continue;
		while (fread(ent, 1, sizeof(ent), f) == sizeof(ent))
			n += (ent[16] | ent[17] | ent[18] | ent[19]) != 0;
		fclose(f);
	}
	closedir(d);
	printf("%ld\n", n);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && !strcmp(argv[1], "spawn"))
		return spawn(atoi(argv[2]));
	if (argc == 5 && !strcmp(argv[1], "churn"))
		return churn(argv[2], atoi(argv[3]), atoi(argv[4]));
	if (argc >= 5 && argc <= 7 && !strcmp(argv[1], "probe")) {
		stall_path = argc > 5 ? argv[5] : NULL;
		watch_cgroup = argc > 6 ? argv[6] : NULL;
		return probe(argv[2], atoi(argv[3]), atoi(argv[4]));
	}
	if (argc == 5 && !strcmp(argv[1], "work"))
		return work(argv[2], atoi(argv[3]), atoi(argv[4]));
	if (argc == 3 && !strcmp(argv[1], "samples"))
		return samples(argv[2]);
	fprintf(stderr, "usage: see the top of tests/bench/fleet-probe.c\n");
	return 2;
}
