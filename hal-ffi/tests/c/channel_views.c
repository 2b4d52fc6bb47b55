/*
 * channel_views.c: a channel's samples in place through the C library:
 * this program forks; the parent fills 40 loaned slots of a 2-slot
 * broadcast channel where they lie (through the slot's address where the
 * memory is host-visible, hal_loan_write otherwise) and publishes them,
 * and the child reads each sample where it lies (its address, or
 * hal_sample_read) before releasing it. Then, in one process: a held
 * sample keeps its slot (the publisher is busy) until released; a stale
 * loan, a second publish or release, and reads past a sample answer their
 * statuses; a loan outlives its publisher's release.
 *
 *   channel_views BACKEND
 *
 * Prints "N checks passed, 0 failed" and exits 0, or names each failure.
 */
#define _GNU_SOURCE
#include <hal.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SAMPLES 40
#define SLOT 4096
#define TIMEOUT_NS 30000000000LL

#include "checks.h"

/* Sample i: SLOT bytes, byte k is (i * 7 + k) % 251. */
static void fill(unsigned char *out, int i) {
    for (int k = 0; k < SLOT; k++)
        out[k] = (unsigned char)((i * 7 + k) % 251);
}

static int child(const char *backend, const char *channel, int ready) {
    hal_device *dev = NULL;
    EXPECT(hal_device_open(backend, 0, &dev), HAL_OK);
    hal_subscriber *sub = NULL;
    EXPECT(hal_subscriber_open(dev, channel, &sub, NULL), HAL_OK);
    CHECK(write(ready, "s", 1) == 1);
    unsigned char want[SLOT], copy[SLOT];
    int in_place = 0;
    for (int i = 0; i < SAMPLES; i++) {
        hal_sample *s = NULL;
        const void *at = NULL;
        uint64_t len = 0, seq = 99;
        EXPECT(hal_receive_sample(sub, TIMEOUT_NS, &s, &at, &len, &seq), HAL_OK);
        fill(want, i);
        CHECK(seq == (uint64_t)i && len == SLOT);
        if (at) {
            in_place++;
            CHECK(memcmp(at, want, SLOT) == 0);
        }
        EXPECT(hal_sample_read(s, 0, copy, SLOT), HAL_OK);
        CHECK(memcmp(copy, want, SLOT) == 0);
        EXPECT(hal_sample_read(s, SLOT - 1, copy, 2), HAL_ERR_INVALID_ARGUMENT);
        EXPECT(hal_sample_release(s), HAL_OK);
        EXPECT(hal_sample_release(s), HAL_ERR_DOUBLE_RELEASE);
    }
    printf("child read %d samples in place\n", in_place);
    fflush(stdout);
    hal_sample *none = NULL;
    uint64_t len = 0;
    EXPECT(hal_receive_sample(sub, TIMEOUT_NS, &none, NULL, &len, NULL), HAL_ERR_CLOSED);
    EXPECT(hal_subscriber_release(sub), HAL_OK);
    EXPECT(hal_device_release(dev), HAL_OK);
    return failed ? 1 : 0;
}

int main(int argc, char **argv) {
    const char *backend = argc > 1 ? argv[1] : "cpu-shm";
    char channel[64];
    snprintf(channel, sizeof channel, "c-test-views-%d", (int)getpid());

    hal_device *dev = NULL;
    EXPECT(hal_device_open(backend, 0, &dev), HAL_OK);
    hal_channel_options opts = {sizeof opts, 2, SLOT, HAL_CHANNEL_BROADCAST, TIMEOUT_NS};
    hal_publisher *pub = NULL;
    EXPECT(hal_publisher_create(dev, channel, &opts, &pub), HAL_OK);
    int ready[2];
    CHECK(pipe(ready) == 0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        passed = failed = 0;
        close(ready[0]);
        _exit(child(backend, channel, ready[1]));
    }
    close(ready[1]);
    char byte;
    CHECK(read(ready[0], &byte, 1) == 1); /* the child subscribed */
    unsigned char data[SLOT];
    int in_place = 0;
    for (int i = 0; i < SAMPLES; i++) {
        hal_loan *loan = NULL;
        void *at = NULL;
        uint64_t capacity = 0, seq = 99;
        EXPECT(hal_publisher_loan(pub, true, &loan, &at, &capacity), HAL_OK);
        CHECK(capacity == SLOT);
        fill(data, i);
        if (at) {
            in_place++;
            memcpy(at, data, SLOT);
        } else {
            EXPECT(hal_loan_write(loan, 0, data, SLOT), HAL_OK);
        }
        EXPECT(hal_loan_write(loan, SLOT - 1, data, 2), HAL_ERR_INVALID_ARGUMENT);
        EXPECT(hal_loan_publish(loan, SLOT, &seq), HAL_OK);
        CHECK(seq == (uint64_t)i);
        EXPECT(hal_loan_publish(loan, SLOT, &seq), HAL_ERR_DOUBLE_RELEASE);
    }
    printf("parent filled %d slots in place\n", in_place);
    EXPECT(hal_publisher_release(pub), HAL_OK);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* One slot, in one process. */
    hal_channel_options one = {sizeof one, 1, SLOT, HAL_CHANNEL_BROADCAST, 0};
    EXPECT(hal_publisher_create(dev, channel, &one, &pub), HAL_OK);
    hal_subscriber *sub = NULL;
    EXPECT(hal_subscriber_open(dev, channel, &sub, NULL), HAL_OK);
    hal_loan *stale = NULL, *loan = NULL;
    EXPECT(hal_publisher_loan(pub, false, &stale, NULL, NULL), HAL_OK);
    EXPECT(hal_publisher_loan(pub, false, &loan, NULL, NULL), HAL_OK);
    EXPECT(hal_loan_write(loan, 0, "held", 5), HAL_OK);
    EXPECT(hal_loan_publish(loan, 5, NULL), HAL_OK);
    EXPECT(hal_loan_publish(stale, 5, NULL), HAL_ERR_INVALID_ARGUMENT);
    hal_sample *s = NULL;
    uint64_t len = 0;
    EXPECT(hal_receive_sample(sub, 0, &s, NULL, &len, NULL), HAL_OK);
    CHECK(len == 5);
    /* The held sample keeps the only slot. */
    EXPECT(hal_publisher_loan(pub, false, &loan, NULL, NULL), HAL_ERR_BUSY);
    char back[5];
    EXPECT(hal_sample_read(s, 0, back, 5), HAL_OK);
    CHECK(memcmp(back, "held", 5) == 0);
    EXPECT(hal_sample_release(s), HAL_OK);
    EXPECT(hal_publisher_loan(pub, false, &loan, NULL, NULL), HAL_OK);
    /* A loan outlives its publisher's release: it still publishes. */
    EXPECT(hal_publisher_release(pub), HAL_OK);
    EXPECT(hal_loan_write(loan, 0, "late", 5), HAL_OK);
    EXPECT(hal_loan_publish(loan, 5, NULL), HAL_OK);
    EXPECT(hal_receive_sample(sub, 0, &s, NULL, &len, NULL), HAL_OK);
    EXPECT(hal_sample_read(s, 0, back, 5), HAL_OK);
    CHECK(memcmp(back, "late", 5) == 0);
    EXPECT(hal_sample_release(s), HAL_OK);
    /* The last loan's end closed the channel. */
    EXPECT(hal_receive_sample(sub, TIMEOUT_NS, &s, NULL, &len, NULL), HAL_ERR_CLOSED);
    EXPECT(hal_loan_release(stale), HAL_ERR_DOUBLE_RELEASE);
    EXPECT(hal_receive_sample(NULL, 0, &s, NULL, &len, NULL), HAL_ERR_NULL_ARGUMENT);
    EXPECT(hal_sample_release((hal_sample *)(uintptr_t)0xdead0009), HAL_ERR_INVALID_OBJECT);
    EXPECT(hal_subscriber_release(sub), HAL_OK);
    EXPECT(hal_device_release(dev), HAL_OK);

    printf("%d checks passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
