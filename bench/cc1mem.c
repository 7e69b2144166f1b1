/*
 * cc1 memory sampler.
 *
 * usage: sampler <label> <shell command>
 *   Runs `/bin/sh -c "exec <shell command>"` (so the shell becomes the gcc driver,
 *   same pid), finds the driver's child whose Name is "cc1" via
 *   /proc/<driver>/task/<driver>/children (polled every 50 us until found), then
 *   re-reads /proc/<cc1>/status every 1 ms (absolute-deadline clock_nanosleep) until
 *   the process is gone or is a zombie (no Vm* lines). Only samples whose Name is
 *   "cc1" are counted (the forked child is still "gcc" until it execs cc1).
 *
 * Prints one line of key=value pairs on stdout:
 *   peak VmRSS / RssAnon / RssFile / RssShmem (KiB, max over samples),
 *   VmHWM at the last good sample, number of samples, cc1 observed lifetime
 *   (first to last good sample), max gap between consecutive good samples,
 *   driver wall time (fork -> wait4), driver exit status, and ru_maxrss from wait4
 *   (Linux returns RUSAGE_BOTH for the waited child: max over driver and all of its
 *   waited-for descendants, i.e. effectively max(cc1, as, driver) peak RSS).
 * Exit snapshot: right after cc1 is found, the sampler attaches to it with
 *   PTRACE_SEIZE + PTRACE_O_TRACEEXIT (no syscall tracing). When cc1 calls exit, it stops at
 *   PTRACE_EVENT_EXIT *before* its mm is torn down; the sampler then reads /proc/<cc1>/status
 *   once more (exit_* fields) and detaches. Because each loop iteration reads status first
 *   and only then checks for the exit stop, the regular sample taken in the iteration that
 *   detects the stop is itself taken while cc1 is held at exit, so peak_* = max over the
 *   1-ms samples *including* one sample at exit (exit_* is a second read of the same state).
 *   Cost: cc1's exit is delayed by up to ~1 ms (until the next sampling tick); wall times
 *   include that delay. (sampler_v1_noptrace.c is the same sampler without this.)
 * The driver's stdout/stderr go to the sampler's stderr.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long field(const char *buf, const char *key)
{
	const char *p = strstr(buf, key);
	if (!p)
		return -1;
	p += strlen(key);
	return strtol(p, NULL, 10);
}

struct st {
	char name[32];
	long vmrss, anon, file, shmem, hwm;
};

/* returns 1 if a full sample was read, 0 if process gone/zombie/not yet cc1 */
static int read_status(int fd, struct st *s)
{
	static char buf[8192];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	s->name[0] = 0;
	if (!strncmp(buf, "Name:", 5)) {
		const char *p = buf + 5;
		while (*p == ' ' || *p == '\t')
			p++;
		int i = 0;
		while (*p && *p != '\n' && i < 31)
			s->name[i++] = *p++;
		s->name[i] = 0;
	}
	s->vmrss = field(buf, "\nVmRSS:");
	s->anon = field(buf, "\nRssAnon:");
	s->file = field(buf, "\nRssFile:");
	s->shmem = field(buf, "\nRssShmem:");
	s->hwm = field(buf, "\nVmHWM:");
	if (s->vmrss < 0 || s->anon < 0)
		return 0; /* zombie: no mm */
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s label 'command'\n", argv[0]);
		return 2;
	}
	char *cmd;
	if (asprintf(&cmd, "exec %s", argv[2]) < 0)
		return 2;

	double t0 = now();
	pid_t drv = fork();
	if (drv < 0) {
		perror("fork");
		return 2;
	}
	if (drv == 0) {
		dup2(2, 1);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}

	char path[128];
	snprintf(path, sizeof path, "/proc/%d/task/%d/children", drv, drv);

	pid_t cc1 = -1;
	int sfd = -1;
	struct st s;
	/* discover cc1 */
	while (cc1 < 0) {
		int status;
		pid_t w = waitpid(drv, &status, WNOHANG | __WNOTHREAD);
		if (w == drv) {
			/* driver exited before we saw cc1 */
			double t1 = now();
			printf("label=%s found=0 exit=%d wall=%.4f\n", argv[1],
			       WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), t1 - t0);
			return 0;
		}
		int fd = open(path, O_RDONLY);
		if (fd >= 0) {
			char b[512];
			ssize_t n = read(fd, b, sizeof b - 1);
			close(fd);
			if (n > 0) {
				b[n] = 0;
				char *p = b;
				while (*p) {
					long c = strtol(p, &p, 10);
					if (c <= 0)
						break;
					char sp[64];
					snprintf(sp, sizeof sp, "/proc/%ld/status", c);
					int f2 = open(sp, O_RDONLY);
					if (f2 < 0)
						continue;
					/* wait for exec of cc1 (child is "gcc"/"sh" before exec) */
					struct st t;
					int tries = 0;
					for (;;) {
						int ok = read_status(f2, &t);
						if (!strcmp(t.name, "cc1") || (!ok && t.name[0] == 0))
							break;
						if (strcmp(t.name, "gcc") && strcmp(t.name, "sh"))
							break; /* e.g. "as" */
						if (++tries > 200000)
							break;
						usleep(20);
					}
					if (!strcmp(t.name, "cc1")) {
						cc1 = (pid_t)c;
						sfd = f2;
						break;
					}
					close(f2);
				}
			}
		}
		if (cc1 < 0)
			usleep(50);
	}

	int traced = ptrace(PTRACE_SEIZE, cc1, 0, (void *)(long)PTRACE_O_TRACEEXIT) == 0;
	struct st ex = { "", -1, -1, -1, -1, -1 };
	int got_exit = 0;
	long pk_rss = 0, pk_anon = 0, pk_file = 0, pk_shmem = 0, last_hwm = 0, last_rss = 0;
	long nsamp = 0;
	double first = 0, last = 0, maxgap = 0, prev = 0;
	struct timespec next;
	clock_gettime(CLOCK_MONOTONIC, &next);
	for (;;) {
		if (!read_status(sfd, &s))
			break;
		double t = now();
		if (strcmp(s.name, "cc1"))
			break;
		if (nsamp == 0)
			first = t;
		else if (t - prev > maxgap)
			maxgap = t - prev;
		prev = last = t;
		nsamp++;
		if (s.vmrss > pk_rss) pk_rss = s.vmrss;
		if (s.anon > pk_anon) pk_anon = s.anon;
		if (s.file > pk_file) pk_file = s.file;
		if (s.shmem > pk_shmem) pk_shmem = s.shmem;
		last_hwm = s.hwm;
		last_rss = s.vmrss;
		if (traced) {
			int ws;
			pid_t w = waitpid(cc1, &ws, WNOHANG | __WALL);
			if (w == cc1 && WIFSTOPPED(ws)) {
				if ((ws >> 8) == (SIGTRAP | (PTRACE_EVENT_EXIT << 8))) {
					got_exit = read_status(sfd, &ex);
					ptrace(PTRACE_DETACH, cc1, 0, 0);
					break;
				}
				/* signal-delivery stop: pass the signal on */
				ptrace(PTRACE_CONT, cc1, 0, (void *)(long)WSTOPSIG(ws));
			} else if (w == cc1) {
				break; /* exited */
			}
		}
		next.tv_nsec += 1000000;
		if (next.tv_nsec >= 1000000000) {
			next.tv_nsec -= 1000000000;
			next.tv_sec++;
		}
		/* if we fell behind, resynchronise instead of bursting */
		struct timespec cur;
		clock_gettime(CLOCK_MONOTONIC, &cur);
		if (cur.tv_sec > next.tv_sec ||
		    (cur.tv_sec == next.tv_sec && cur.tv_nsec > next.tv_nsec))
			next = cur;
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
	}
	close(sfd);

	int status;
	struct rusage ru;
	while (wait4(drv, &status, 0, &ru) < 0 && errno == EINTR)
		;
	double t1 = now();
	printf("label=%s found=1 exit=%d wall=%.4f cc1_pid=%d samples=%ld cc1_seen=%.4f "
	       "maxgap_ms=%.3f peak_vmrss_kb=%ld peak_anon_kb=%ld peak_file_kb=%ld "
	       "peak_shmem_kb=%ld last_hwm_kb=%ld last_vmrss_kb=%ld ru_maxrss_kb=%ld traced=%d got_exit=%d "
	       "exit_vmrss_kb=%ld exit_anon_kb=%ld exit_file_kb=%ld exit_shmem_kb=%ld exit_hwm_kb=%ld\n",
	       argv[1], WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
	       t1 - t0, cc1, nsamp, last - first, maxgap * 1e3, pk_rss, pk_anon, pk_file,
	       pk_shmem, last_hwm, last_rss, ru.ru_maxrss, traced, got_exit,
	       ex.vmrss, ex.anon, ex.file, ex.shmem, ex.hwm);
	return 0;
}
