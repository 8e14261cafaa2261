#include <malloc.h>
/// malloc's bytes in use (mallinfo2's uordblks), for Swift: the struct is returned by value.
static inline unsigned long heap_in_use(void) { struct mallinfo2 m = mallinfo2(); return m.uordblks; }
