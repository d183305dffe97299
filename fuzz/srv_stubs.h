/* srv_stubs.h - the server functions that server/feed.c refers to but the
 * parse functions under test never reach (srv_feed_name_ok is the one they
 * use); linking feed.c needs them. Reaching one is a harness bug: abort. */
#ifndef SOTTO_FUZZ_SRV_STUBS_H
#define SOTTO_FUZZ_SRV_STUBS_H

#include "server.h"

#include <stdlib.h>

double srv_now(void) { abort(); }
void srv_session_unref(srv *s, srv_session *ss) {
    (void)s, (void)ss;
    abort();
}
srv_session *srv_feed_remote_find(srv *s, const char *name) {
    (void)s, (void)name;
    abort();
}

#endif
