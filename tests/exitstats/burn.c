/*
 * A short-lived process for the exitstats suite: `burn MS` spins until it
 * has used MS milliseconds of CPU, then exits; `burn` spins until killed.
 */
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
	long ms = argc > 1 ? atol(argv[1]) : -1;
	volatile unsigned long x = 0;
	struct timespec t;

	for (;;) {
		for (int i = 0; i < 100000; i++)
			x += i;
		clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
		if (ms >= 0 && t.tv_sec * 1000 + t.tv_nsec / 1000000 >= ms)
			return 0;
	}
}
