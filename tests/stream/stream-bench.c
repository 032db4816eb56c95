// SPDX-License-Identifier: GPL-2.0
/*
 * stream-bench: readers of cgroup stats, plain files vs stat stream files.
 *
 *   stream-bench setup NCG           create /sys/fs/cgroup/bench/cg0..NCG-1
 *   stream-bench load NCG NLOAD SECS run NLOAD memory/CPU churners in cg0..
 *   stream-bench plain NCG NREADERS SECS PERIOD_MS
 *   stream-bench stream NCG NREADERS SECS
 *
 * plain:  every reader reads cpu.stat and memory.stat of every cgroup once
 *         per period (on an absolute schedule), with pread() at 0 on fds
 *         kept open.
 * stream: every reader waits for each new record of cpu.stat.stream and
 *         memory.stat.stream of every cgroup (the kernel's interval sets
 *         the rate).
 * Prints the number of sweeps and file reads done.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BASE "/sys/fs/cgroup/bench"
#define BUFSZ 65536

static const char *files[] = { "cpu.stat", "memory.stat" };
#define NFILES 2

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, s, strlen(s));
	close(fd);
	return n == (ssize_t)strlen(s) ? 0 : -1;
}

static int setup(int ncg)
{
	char p[256];
	int i;

	mkdir(BASE, 0755);
	if (write_file("/sys/fs/cgroup/cgroup.subtree_control", "+memory +cpu") ||
	    write_file(BASE "/cgroup.subtree_control", "+memory +cpu"))
		return perror("subtree_control"), 1;
	write_file("/sys/fs/cgroup/cgroup.subtree_control", "+io");
	write_file(BASE "/cgroup.subtree_control", "+io");
	for (i = 0; i < ncg; i++) {
		snprintf(p, sizeof(p), BASE "/cg%d", i);
		if (mkdir(p, 0755) && errno != EEXIST)
			return perror(p), 1;
	}
	return 0;
}

static void churn(long until)
{
	size_t sz = 2 << 20;
	volatile unsigned long x = 0;

	while (now_ms() < until) {
		char *m = mmap(NULL, sz, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		long t;

		if (m != MAP_FAILED) {
			memset(m, 1, sz);
			munmap(m, sz);
		}
		for (t = now_ms(); now_ms() - t < 5;)
			x++;
		usleep(5000);
	}
}

static int load(int ncg, int nload, int secs)
{
	long until = now_ms() + secs * 1000L;
	char p[256];
	int i;

	for (i = 0; i < nload; i++) {
		pid_t pid = fork();

		if (!pid) {
			char pidbuf[32];

			snprintf(p, sizeof(p), BASE "/cg%d/cgroup.procs", i % ncg);
			snprintf(pidbuf, sizeof(pidbuf), "%d", getpid());
			write_file(p, pidbuf);
			churn(until);
			_exit(0);
		}
	}
	while (wait(NULL) > 0)
		;
	return 0;
}

static int reader(int ncg, int secs, int period_ms, int stream)
{
	int n = ncg * NFILES, i, *fds = calloc(n, sizeof(int));
	char *buf = malloc(BUFSZ), p[256];
	long until = now_ms() + secs * 1000L, next = now_ms();
	long sweeps = 0, reads = 0, errs = 0;

	for (i = 0; i < n; i++) {
		snprintf(p, sizeof(p), BASE "/cg%d/%s%s", i / NFILES,
			 files[i % NFILES], stream ? ".stream" : "");
		fds[i] = open(p, O_RDONLY);
		if (fds[i] < 0)
			return perror(p), 1;
	}
	if (stream) {
		/* consume the current records, then follow the stream */
		for (i = 0; i < n; i++)
			pread(fds[i], buf, BUFSZ, 0);
	}
	while (now_ms() < until) {
		for (i = 0; i < n; i++) {
			ssize_t r = pread(fds[i], buf, BUFSZ, 0);

			if (r <= 0)
				errs++;
			else
				reads++;
		}
		sweeps++;
		if (!stream) {
			next += period_ms;
			if (next > now_ms())
				usleep((next - now_ms()) * 1000);
		}
	}
	printf("reader %d: sweeps %ld reads %ld errors %ld\n", getpid(),
	       sweeps, reads, errs);
	return 0;
}

int main(int argc, char **argv)
{
	int i, nr;

	if (argc < 3)
		goto usage;
	if (!strcmp(argv[1], "setup"))
		return setup(atoi(argv[2]));
	if (argc < 5)
		goto usage;
	if (!strcmp(argv[1], "load"))
		return load(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
	nr = atoi(argv[3]);
	for (i = 0; i < nr; i++) {
		if (!fork()) {
			if (!strcmp(argv[1], "plain") && argc >= 6)
				_exit(reader(atoi(argv[2]), atoi(argv[4]),
					     atoi(argv[5]), 0));
			_exit(reader(atoi(argv[2]), atoi(argv[4]), 0, 1));
		}
	}
	while (wait(NULL) > 0)
		;
	{
		struct rusage ru;

		getrusage(RUSAGE_CHILDREN, &ru);
		printf("readers total: user %ld.%03lds sys %ld.%03lds\n",
		       (long)ru.ru_utime.tv_sec, (long)ru.ru_utime.tv_usec / 1000,
		       (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec / 1000);
	}
	return 0;
usage:
	fprintf(stderr, "usage: see the comment at the top of %s\n", __FILE__);
	return 2;
}
