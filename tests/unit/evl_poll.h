/* A poll()-based event loop (common/evl.h) for driving the lower layers in tests, without
 * libwebsockets. */
#ifndef KGW_TESTS_EVL_POLL_H
#define KGW_TESTS_EVL_POLL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/evl.h"

typedef struct evl_poll evl_poll_t;

evl_poll_t *evl_poll_new(void);
void evl_poll_destroy(evl_poll_t **l);
evl_t *evl_poll_evl(evl_poll_t *l);
/* Runs until done() returns true or timeout_ms passes; returns done()'s last value. */
bool evl_poll_run(evl_poll_t *l, bool (*done)(void *), void *data, int timeout_ms);

#endif
