/*
 * A node of soak's tests whose memory grows in a known place, in C so that
 * its allocations are malloc's own (no runtime between them and the
 * allocator) and its call sites have plain names.
 *
 *   allocnode leak RATE      three allocating functions, one of which
 *                            (remember_session) never frees: RATE bytes a
 *                            second kept, the others allocate and free
 *                            three times as much (parse_request) or keep a
 *                            bounded cache (cache_block)
 *   allocnode arenas THREADS BYTES EVERY
 *                            starts a thread every EVERY seconds, up to
 *                            THREADS, each of which holds BYTES in small
 *                            blocks, half of them freed again (fragments):
 *                            under glibc each thread gets an arena of its
 *                            own, and the arenas carry the growth
 *
 * It prints "ready" when it has started, and runs until it is signalled.
 * Build: cc -O1 -g -fno-omit-frame-pointer -pthread -o allocnode allocnode.c
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile long sink;

static void tick(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* Allocates and frees: no growth. */
__attribute__((noinline)) static void parse_request(long bytes) {
    char *p = malloc(bytes);
    memset(p, 1, bytes);
    sink += p[bytes / 2];
    free(p);
}

/* A bounded cache: replaces its oldest block. */
#define CACHE 256
static char *cache[CACHE];
static int cache_next;
__attribute__((noinline)) static void cache_block(long bytes) {
    free(cache[cache_next]);
    cache[cache_next] = malloc(bytes);
    memset(cache[cache_next], 2, bytes);
    cache_next = (cache_next + 1) % CACHE;
}

/* The leak: every session is remembered, none forgotten. */
struct session {
    struct session *next;
    char data[];
};
static struct session *sessions;
__attribute__((noinline)) static void remember_session(long bytes) {
    struct session *s = malloc(sizeof(struct session) + bytes);
    memset(s->data, 3, bytes);
    s->next = sessions;
    sessions = s;
}

static void leak(long rate) {
    /* 100 rounds a second, each 1/100 of the rate in 2 KiB sessions. */
    long per_round = rate / 100, session = 2048;
    for (;;) {
        for (long kept = 0; kept < per_round; kept += session) {
            remember_session(session);
            parse_request(3 * session);
            cache_block(session);
        }
        tick(10);
    }
}

struct holder {
    long bytes;
};

static void *hold(void *arg) {
    long bytes = ((struct holder *)arg)->bytes, block = 1024;
    long n = 2 * bytes / block;
    char **blocks = malloc(n * sizeof(char *));
    for (long i = 0; i < n; i++) {
        blocks[i] = malloc(block);
        memset(blocks[i], 4, block);
    }
    for (long i = 0; i < n; i += 2)
        free(blocks[i]);
    for (;;)
        pause();
    return NULL;
}

static void arenas(int threads, long bytes, long every_s) {
    struct holder h = {bytes};
    for (int i = 0; i < threads; i++) {
        pthread_t t;
        pthread_create(&t, NULL, hold, &h);
        tick(every_s * 1000);
    }
    for (;;)
        pause();
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && strcmp(argv[1], "leak") == 0) {
        printf("ready\n");
        leak(atol(argv[2]));
    } else if (argc == 5 && strcmp(argv[1], "arenas") == 0) {
        printf("ready\n");
        arenas(atoi(argv[2]), atol(argv[3]), atol(argv[4]));
    }
    fprintf(stderr, "usage: allocnode leak RATE | allocnode arenas THREADS BYTES EVERY\n");
    return 2;
}
