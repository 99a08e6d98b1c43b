"""Plain English words: the filler text when the server cannot tokenize for us."""

WORDS = (
    "the of and to in is was for on that with as by at from his it an were are which this be or has "
    "had not but their first one its new after who they have her she two been other when there all "
    "during into school time may years more most only over city some world would where later up such "
    "used many can state about national out known university united then made three while under "
    "between well being both through year film team since high season part these him also around "
    "early each against before area government people same several called until because album life "
    "family series game what number any general public music began north could another main history "
    "river south small west east second house found work four large club group include state own "
    "play long near system several within member often same name local power form station record "
    "church way based country road major line best still order company will must among then last"
).split()
