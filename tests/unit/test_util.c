/* common/util.c's small file helpers: util_write_small and util_read_small on a scratch
 * directory (an existing file is written in one go, a missing one is an error, not created). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"

#include "common/util.h"

int main(void)
{
    char dir[] = "/tmp/kgw-test-util-XXXXXX", path[64], missing[64], buf[16];
    if (!mkdtemp(dir))
        return perror("mkdtemp"), 1;
    snprintf(path, sizeof(path), "%s/value", dir);
    snprintf(missing, sizeof(missing), "%s/absent", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    close(fd);

    CHECK_CASE("write an existing file");
    CHECK_INT(util_write_small(path, "+memory +pids"), 0);
    CHECK_INT(util_read_small(path, buf, sizeof(buf)), 13);
    CHECK_STR(buf, "+memory +pids");

    CHECK_CASE("a missing file is not created");
    CHECK_INT(util_write_small(missing, "1"), -ENOENT);
    CHECK_INT(access(missing, F_OK), -1);

    CHECK_CASE("a directory");
    CHECK_INT(util_write_small(dir, "1"), -EISDIR);

    CHECK_CASE("read: cut to the buffer, NUL-terminated");
    CHECK_INT(util_read_small(path, buf, 5), 4);
    CHECK_STR(buf, "+mem");
    CHECK_INT(util_read_small(missing, buf, sizeof(buf)), -1);

    unlink(path);
    rmdir(dir);
    CHECK_DONE();
}
