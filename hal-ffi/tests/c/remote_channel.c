/*
 * remote_channel.c: a channel with subscribers on other hosts
 * (hal_remote_channel_offer, hal_remote_subscriber_*) between three
 * processes on the loopback, over UCX. The program forks before any hal
 * call: two subscribers; the parent publishes. The parent creates a
 * broadcast channel on CPU shared memory, offers it from its node with a
 * secret, and hands the offer's text to each subscriber through a pipe.
 * Each subscriber binds a node of its own, is refused with a text whose
 * secret is another (HAL_ERR_PERMISSION_DENIED), with a text one character
 * of which was changed (HAL_ERR_INVALID_HANDLE) and with a text that is no
 * handle, then connects with the offer's text (the first with two slots of
 * its own, the second with as many as the channel has) and says it is
 * ready. The parent then publishes SAMPLES samples, each of its own length
 * and bytes; each subscriber receives every one in place and checks its
 * sequence and every byte, then says it is done. The parent withdraws the
 * offer: each subscriber's next receive answers HAL_ERR_CLOSED.
 *
 *   remote_channel
 *
 * Each subscriber prints "subscriber N: N checks passed, 0 failed"; the
 * parent adds its children's exit statuses to its own checks and prints
 * "N checks passed, 0 failed" last, exiting 0, or names each failure; it
 * prints "UCX unavailable: ..." and exits 2 where UCX cannot be loaded.
 */
#define _GNU_SOURCE
#include <hal.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checks.h"

#define SUBSCRIBERS 2
#define SAMPLES 64
#define SLOTS 4
#define SLOT 16384
#define SECRET "00112233445566778899aabbccddeeff"
#define TIMEOUT_NS 30000000000LL
#define TEXT_MAX 1024

/* Sample `i`'s length and its byte `j`. */
static uint64_t sample_len(uint64_t i) { return 1 + (i * 997) % SLOT; }
static unsigned char sample_byte(uint64_t i, uint64_t j) {
    return (unsigned char)(i * 131 + j * 7 + (j >> 8));
}

/* One line from `fd` into `buf` (without its newline); its length, or -1. */
static int read_line(int fd, char *buf, size_t cap) {
    size_t n = 0;
    while (n + 1 < cap) {
        char c;
        if (read(fd, &c, 1) != 1)
            return -1;
        if (c == '\n') {
            buf[n] = '\0';
            return (int)n;
        }
        buf[n++] = c;
    }
    return -1;
}

static int write_line(int fd, const char *line) {
    size_t len = strlen(line);
    return write(fd, line, len) == (ssize_t)len && write(fd, "\n", 1) == 1 ? 0 : -1;
}

/* The handle's text is base64url (no padding) of its bytes; the secret is
 * the 16 bytes before the last 4, a CRC-32 of the bytes before it. */
static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static size_t b64_decode(const char *in, unsigned char *out) {
    size_t n = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (; *in; in++) {
        const char *at = strchr(B64, *in);
        if (!at)
            return 0;
        acc = (acc << 6) | (uint32_t)(at - B64);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (unsigned char)(acc >> bits);
        }
    }
    return n;
}

static void b64_encode(const unsigned char *in, size_t len, char *out) {
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        acc = (acc << 8) | in[i];
        bits += 8;
        while (bits >= 6) {
            bits -= 6;
            *out++ = B64[(acc >> bits) & 63];
        }
    }
    if (bits > 0)
        *out++ = B64[(acc << (6 - bits)) & 63];
    *out = '\0';
}

static uint32_t crc32(const unsigned char *p, size_t len) {
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < len; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1)));
    }
    return ~crc;
}

/* `text` with another secret (its first byte flipped) and a right CRC:
 * 0, or -1 when it is no handle text. */
static int other_secret(const char *text, char *out) {
    unsigned char bytes[TEXT_MAX];
    if (strncmp(text, "hal1r.", 6) != 0 || strlen(text) >= TEXT_MAX)
        return -1;
    size_t n = b64_decode(text + 6, bytes);
    if (n < 24)
        return -1;
    bytes[n - 20] ^= 1;
    uint32_t crc = crc32(bytes, n - 4);
    for (int k = 0; k < 4; k++)
        bytes[n - 4 + k] = (unsigned char)(crc >> (8 * k));
    memcpy(out, "hal1r.", 6);
    b64_encode(bytes, n, out + 6);
    return 0;
}

/* A subscriber: refused with forged texts, then receives every sample. */
static int subscriber(int index, int from_parent, int to_parent) {
    char text[TEXT_MAX], forged[TEXT_MAX];
    CHECK(read_line(from_parent, text, sizeof text) > 6);
    hal_device *dev = NULL;
    hal_remote_node *node = NULL;
    EXPECT(hal_device_open("cpu-shm", 0, &dev), HAL_OK);
    hal_status bound = hal_remote_node_bind("127.0.0.1:0", &node);
    if (bound == HAL_ERR_UNAVAILABLE) {
        printf("UCX unavailable: %s\n", hal_last_error());
        return 2;
    }
    EXPECT(bound, HAL_OK);

    /* Another secret: refused by the publisher's node. */
    hal_remote_subscriber *sub = NULL;
    CHECK(other_secret(text, forged) == 0 && strcmp(forged, text) != 0);
    EXPECT(hal_remote_subscriber_connect(node, dev, forged, NULL, &sub),
           HAL_ERR_PERMISSION_DENIED);
    CHECK(sub == NULL);
    /* A character changed: its CRC does not hold. */
    strcpy(forged, text);
    size_t at = strlen(forged) / 2;
    forged[at] = forged[at] == 'A' ? 'B' : 'A';
    EXPECT(hal_remote_subscriber_connect(node, dev, forged, NULL, &sub), HAL_ERR_INVALID_HANDLE);
    EXPECT(hal_remote_subscriber_connect(node, dev, "frames", NULL, &sub), HAL_ERR_INVALID_HANDLE);
    EXPECT(hal_remote_subscriber_connect(node, dev, NULL, NULL, &sub), HAL_ERR_NULL_ARGUMENT);
    EXPECT(hal_remote_subscriber_connect((hal_remote_node *)dev, dev, text, NULL, &sub),
           HAL_ERR_INVALID_OBJECT);

    hal_remote_subscribe_options opts = {sizeof opts, index == 0 ? 2 : 0};
    EXPECT(hal_remote_subscriber_connect(node, dev, text, &opts, &sub), HAL_OK);
    CHECK(write_line(to_parent, "ready") == 0);

    int every_byte = 1, in_place = 0;
    for (uint64_t i = 0; i < SAMPLES; i++) {
        hal_remote_sample *sample = NULL;
        const unsigned char *bytes = NULL;
        uint64_t len = 0, seq = 99999;
        hal_status got = hal_remote_receive_sample(sub, TIMEOUT_NS, &sample,
                                                   (const void **)&bytes, &len, &seq);
        EXPECT(got, HAL_OK);
        if (got != HAL_OK)
            break;
        CHECK(seq == i && len == sample_len(i));
        if (bytes) {
            in_place++;
            for (uint64_t j = 0; j < len; j++)
                every_byte &= bytes[j] == sample_byte(i, j);
        }
        /* The same bytes copied out; past the end is refused. */
        static unsigned char copy[SLOT];
        EXPECT(hal_remote_sample_read(sample, 0, copy, (size_t)len), HAL_OK);
        for (uint64_t j = 0; j < len; j++)
            every_byte &= copy[j] == sample_byte(i, j);
        EXPECT(hal_remote_sample_read(sample, 1, copy, (size_t)len), HAL_ERR_INVALID_ARGUMENT);
        EXPECT(hal_remote_sample_release(sample), HAL_OK);
        EXPECT(hal_remote_sample_release(sample), HAL_ERR_DOUBLE_RELEASE);
    }
    CHECK(every_byte);
    CHECK(in_place == SAMPLES);
    /* Nothing more was published: a look finds none. */
    hal_remote_sample *none = NULL;
    uint64_t len = 0;
    EXPECT(hal_remote_receive_sample(sub, 0, &none, NULL, &len, NULL), HAL_ERR_TIMEOUT);
    CHECK(write_line(to_parent, "done") == 0);
    /* The parent withdraws the offer. */
    EXPECT(hal_remote_receive_sample(sub, TIMEOUT_NS, &none, NULL, &len, NULL), HAL_ERR_CLOSED);
    CHECK(strstr(hal_last_error(), "withdrawn") != NULL);

    EXPECT(hal_remote_subscriber_release(sub), HAL_OK);
    EXPECT(hal_remote_subscriber_release(sub), HAL_ERR_DOUBLE_RELEASE);
    EXPECT(hal_remote_node_release(node), HAL_OK);
    EXPECT(hal_device_release(dev), HAL_OK);
    printf("subscriber %d: %d checks passed, %d failed\n", index, passed, failed);
    return failed ? 1 : 0;
}

/* The parent: offer the channel, publish, withdraw. 2 without UCX. */
static int publisher(const int to_child[SUBSCRIBERS], const int from_child[SUBSCRIBERS]) {
    char channel[64];
    snprintf(channel, sizeof channel, "c-remote-channel-%d", (int)getpid());
    hal_device *dev = NULL;
    hal_publisher *pub = NULL;
    hal_remote_node *node = NULL;
    hal_remote_offer *offer = NULL;
    EXPECT(hal_device_open("cpu-shm", 0, &dev), HAL_OK);
    hal_channel_options copts = {sizeof copts, SLOTS, SLOT, HAL_CHANNEL_BROADCAST, TIMEOUT_NS};
    EXPECT(hal_publisher_create(dev, channel, &copts, &pub), HAL_OK);
    hal_status bound = hal_remote_node_bind("127.0.0.1:0", &node);
    if (bound == HAL_ERR_UNAVAILABLE) {
        printf("UCX unavailable: %s\n", hal_last_error());
        return 2;
    }
    EXPECT(bound, HAL_OK);
    /* A secret that is not 32 hex digits. */
    hal_remote_channel_options bad = {sizeof bad, "not hex", 0};
    EXPECT(hal_remote_channel_offer(node, dev, channel, &bad, &offer), HAL_ERR_INVALID_ARGUMENT);
    hal_remote_channel_options opts = {sizeof opts, SECRET, TIMEOUT_NS};
    EXPECT(hal_remote_channel_offer(node, dev, channel, &opts, &offer), HAL_OK);
    char *text = NULL;
    EXPECT(hal_remote_offer_text(offer, &text), HAL_OK);
    CHECK(text && strncmp(text, "hal1r.", 6) == 0);
    for (int i = 0; i < SUBSCRIBERS; i++)
        CHECK(text && write_line(to_child[i], text) == 0);
    hal_string_free(text);

    char line[32];
    for (int i = 0; i < SUBSCRIBERS; i++)
        CHECK(read_line(from_child[i], line, sizeof line) >= 0 && strcmp(line, "ready") == 0);
    size_t connected = 0;
    EXPECT(hal_remote_offer_subscribers(offer, &connected), HAL_OK);
    CHECK(connected == SUBSCRIBERS);

    int sequenced = 1;
    for (uint64_t i = 0; i < SAMPLES; i++) {
        hal_loan *loan = NULL;
        unsigned char *slot = NULL;
        uint64_t capacity = 0, seq = 0;
        EXPECT(hal_publisher_loan(pub, true, &loan, (void **)&slot, &capacity), HAL_OK);
        CHECK(slot != NULL && capacity >= sample_len(i));
        if (!slot || capacity < sample_len(i))
            break;
        for (uint64_t j = 0; j < sample_len(i); j++)
            slot[j] = sample_byte(i, j);
        EXPECT(hal_loan_publish(loan, sample_len(i), &seq), HAL_OK);
        sequenced &= seq == i;
    }
    CHECK(sequenced);

    for (int i = 0; i < SUBSCRIBERS; i++)
        CHECK(read_line(from_child[i], line, sizeof line) >= 0 && strcmp(line, "done") == 0);
    EXPECT(hal_remote_offer_release(offer), HAL_OK);
    EXPECT(hal_remote_offer_release(offer), HAL_ERR_DOUBLE_RELEASE);
    EXPECT(hal_remote_offer_text(offer, &text), HAL_ERR_DOUBLE_RELEASE);
    EXPECT(hal_remote_node_release(node), HAL_OK);
    EXPECT(hal_publisher_release(pub), HAL_OK);
    EXPECT(hal_device_release(dev), HAL_OK);
    return 0;
}

int main(void) {
    int down[SUBSCRIBERS][2], up[SUBSCRIBERS][2];
    for (int i = 0; i < SUBSCRIBERS; i++)
        if (pipe(down[i]) != 0 || pipe(up[i]) != 0) {
            perror("pipe");
            return 1;
        }
    fflush(stdout);
    /* No hal object is made before the forks: each process makes its own. */
    pid_t children[SUBSCRIBERS];
    for (int i = 0; i < SUBSCRIBERS; i++) {
        children[i] = fork();
        if (children[i] == 0) {
            /* Only its own ends: a pipe whose writer is gone reads EOF. */
            for (int k = 0; k < SUBSCRIBERS; k++) {
                close(down[k][1]);
                close(up[k][0]);
                if (k != i) {
                    close(down[k][0]);
                    close(up[k][1]);
                }
            }
            int code = subscriber(i, down[i][0], up[i][1]);
            fflush(stdout);
            _exit(code ? code : failed ? 1 : 0);
        }
    }
    int to_child[SUBSCRIBERS], from_child[SUBSCRIBERS];
    for (int i = 0; i < SUBSCRIBERS; i++) {
        close(down[i][0]);
        close(up[i][1]);
        to_child[i] = down[i][1];
        from_child[i] = up[i][0];
    }
    int code = publisher(to_child, from_child);
    for (int i = 0; i < SUBSCRIBERS; i++)
        close(to_child[i]);
    int status = 0;
    for (int i = 0; i < SUBSCRIBERS; i++) {
        CHECK(waitpid(children[i], &status, 0) == children[i] && WIFEXITED(status) &&
              (WEXITSTATUS(status) == 0 || (code == 2 && WEXITSTATUS(status) == 2)));
        close(from_child[i]);
    }
    if (code == 2)
        return 2;
    printf("%d checks passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
