/*
 * checks.h: the counted checks of the C test programs that fork (each
 * process counts its own): EXPECT a status, CHECK a condition; a failure
 * is printed with the process id and, for a status, hal_last_error().
 */
#ifndef HAL_TEST_CHECKS_H
#define HAL_TEST_CHECKS_H

#include <hal.h>

#include <stdio.h>
#include <unistd.h>

static int passed, failed;

#define EXPECT(call, want)                                                              \
    do {                                                                                \
        hal_status got_ = (call);                                                       \
        if (got_ == (want)) {                                                           \
            passed++;                                                                   \
        } else {                                                                        \
            failed++;                                                                   \
            fprintf(stderr, "%d: %s: status %d, expected %d: %s\n", (int)getpid(), #call, \
                    (int)got_, (int)(want), hal_last_error());                          \
        }                                                                               \
    } while (0)

#define CHECK(cond)                                                             \
    do {                                                                        \
        if (cond) {                                                             \
            passed++;                                                           \
        } else {                                                                \
            failed++;                                                           \
            fprintf(stderr, "%d: line %d: %s does not hold\n", (int)getpid(),   \
                    __LINE__, #cond);                                           \
        }                                                                       \
    } while (0)

#endif
